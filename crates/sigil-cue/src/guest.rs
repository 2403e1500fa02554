//! One instance of the CUE module: its store (memory, fuel, limits), the
//! exports sigil calls, and the metered call loop. A call runs on fuel in
//! slices; between slices the host checks the evaluation's total fuel and
//! its wall-clock deadline, so a runaway policy is stopped at the same
//! point on every machine (fuel) and never outlives its deadline (time).
//! Any trap leaves the guest's Go runtime in an unknown state: the caller
//! must drop the instance.

use std::time::Instant;

use serde::Deserialize;
use wasmi::{
    Engine, Linker, Memory, Module, Store, StoreLimitsBuilder, TrapCode, TypedFunc,
    TypedResumableCall,
};

use crate::wasi::{Host, HostStop};

/// The guest interface version this host speaks (`abi_version` export).
pub(crate) const ABI_VERSION: i32 = 1;
/// Fuel handed to the guest between two host checks: about 10 ms of work.
const FUEL_SLICE: u64 = 100_000_000;
/// The longest outcome the guest may return (its JSON).
const MAX_RESULT_BYTES: usize = 4 << 20;

/// Exports the host needs, by name and signature.
pub(crate) const EXPORTS: &[&str] = &[
    "_initialize",
    "abi_version",
    "describe",
    "input_buffer",
    "compile",
    "evaluate",
    "result_ptr",
    "result_len",
    "set_memory_limit",
];

/// Why a guest call did not complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The call used up its fuel.
    Fuel,
    /// The call passed its wall-clock deadline.
    Deadline,
    /// The guest's memory reached the store's limit.
    Memory,
    /// Anything else: a trap, an exit, a broken contract.
    Trap(String),
}

/// The fuel and the deadline one request may use.
pub(crate) struct Budget {
    pub(crate) fuel: u64,
    pub(crate) deadline: Instant,
    pub(crate) used: u64,
}

impl Budget {
    pub(crate) fn new(fuel: u64, deadline: Instant) -> Self {
        Self {
            fuel,
            deadline,
            used: 0,
        }
    }
}

/// What the guest reports about itself (`describe`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct Description {
    pub(crate) abi: i32,
    pub(crate) cue: String,
    pub(crate) go: String,
}

/// The outcome of `compile` or `evaluate`, as the guest writes it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct Outcome {
    pub(crate) ok: bool,
    #[serde(default)]
    pub(crate) stage: String,
    #[serde(default)]
    pub(crate) message: String,
    #[serde(default)]
    pub(crate) errors: Vec<crate::CueErrorDetail>,
}

/// A live instance.
pub(crate) struct Guest {
    store: Store<Host>,
    memory: Memory,
    input_buffer: TypedFunc<i32, i32>,
    compile: TypedFunc<i32, i32>,
    evaluate: TypedFunc<(i32, i32), i32>,
    result_ptr: TypedFunc<(), i32>,
    result_len: TypedFunc<(), i32>,
    describe: TypedFunc<(), ()>,
    abi_version: TypedFunc<(), i32>,
}

impl Guest {
    /// Instantiates `module` and runs the Go runtime's initialisation under
    /// `budget`; `memory_bytes` caps the guest's linear memory.
    pub(crate) fn new(
        engine: &Engine,
        linker: &Linker<Host>,
        module: &Module,
        memory_bytes: usize,
        budget: &mut Budget,
    ) -> Result<Self, Stop> {
        let limits = StoreLimitsBuilder::new()
            .memory_size(memory_bytes)
            .instances(1)
            .trap_on_grow_failure(true)
            .build();
        let mut store = Store::new(engine, Host::new(limits));
        store.limiter(|host| &mut host.limits);
        let instance = linker
            .instantiate_and_start(&mut store, module)
            .map_err(|e| classify(&e))?;
        let memory = instance
            .get_memory(&store, "memory")
            .ok_or_else(|| Stop::Trap("the module exports no memory".into()))?;
        store.data_mut().memory = Some(memory);
        let func = |name: &str| Stop::Trap(format!("export {name} is missing or mistyped"));
        let initialize: TypedFunc<(), ()> = instance
            .get_typed_func(&store, "_initialize")
            .map_err(|_| func("_initialize"))?;
        let set_memory_limit: TypedFunc<i32, ()> = instance
            .get_typed_func(&store, "set_memory_limit")
            .map_err(|_| func("set_memory_limit"))?;
        let mut guest = Self {
            memory,
            input_buffer: instance
                .get_typed_func(&store, "input_buffer")
                .map_err(|_| func("input_buffer"))?,
            compile: instance
                .get_typed_func(&store, "compile")
                .map_err(|_| func("compile"))?,
            evaluate: instance
                .get_typed_func(&store, "evaluate")
                .map_err(|_| func("evaluate"))?,
            result_ptr: instance
                .get_typed_func(&store, "result_ptr")
                .map_err(|_| func("result_ptr"))?,
            result_len: instance
                .get_typed_func(&store, "result_len")
                .map_err(|_| func("result_len"))?,
            describe: instance
                .get_typed_func(&store, "describe")
                .map_err(|_| func("describe"))?,
            abi_version: instance
                .get_typed_func(&store, "abi_version")
                .map_err(|_| func("abi_version"))?,
            store,
        };
        guest.call(&initialize, (), budget)?;
        // Go's collector should work harder before the store's hard limit
        // turns an allocation into a trap: aim 1/8 below it.
        let soft_mib = (memory_bytes - memory_bytes / 8) >> 20;
        guest.call(
            &set_memory_limit,
            i32::try_from(soft_mib).unwrap_or(i32::MAX),
            budget,
        )?;
        Ok(guest)
    }

    /// The guest's ABI version and what it was built from.
    pub(crate) fn describe(&mut self, budget: &mut Budget) -> Result<Description, Stop> {
        let abi = self.call(&self.abi_version.clone(), (), budget)?;
        if abi != ABI_VERSION {
            return Err(Stop::Trap(format!(
                "it speaks guest ABI {abi}; this sigil speaks {ABI_VERSION}"
            )));
        }
        self.call(&self.describe.clone(), (), budget)?;
        let text = self.result()?;
        serde_json::from_slice(&text)
            .map_err(|e| Stop::Trap(format!("describe returned invalid JSON: {e}")))
    }

    /// `CompileString(policy).Err()`.
    pub(crate) fn compile(&mut self, policy: &str, budget: &mut Budget) -> Result<Outcome, Stop> {
        self.write_input(&[policy.as_bytes()], budget)?;
        let status = self.call(&self.compile.clone(), len_i32(policy.len())?, budget)?;
        self.outcome(status)
    }

    /// cosign's `evaluateCue(policy, document)`.
    pub(crate) fn evaluate(
        &mut self,
        policy: &str,
        document: &[u8],
        budget: &mut Budget,
    ) -> Result<Outcome, Stop> {
        self.write_input(&[policy.as_bytes(), document], budget)?;
        let args = (len_i32(policy.len())?, len_i32(document.len())?);
        let status = self.call(&self.evaluate.clone(), args, budget)?;
        self.outcome(status)
    }

    /// The guest's linear memory in bytes (it only ever grows).
    pub(crate) fn memory_bytes(&self) -> u64 {
        self.memory.size(&self.store).saturating_mul(64 * 1024)
    }

    /// What the guest printed (Go's fatal errors), for diagnostics.
    pub(crate) fn output(&self) -> String {
        let text = String::from_utf8_lossy(&self.store.data().output);
        text.lines().take(3).collect::<Vec<_>>().join(" | ")
    }

    fn write_input(&mut self, parts: &[&[u8]], budget: &mut Budget) -> Result<(), Stop> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let ptr = self.call(&self.input_buffer.clone(), len_i32(total)?, budget)?;
        let mut at = ptr as u32 as usize;
        for part in parts {
            self.memory
                .write(&mut self.store, at, part)
                .map_err(|e| Stop::Trap(format!("input_buffer returned a bad pointer: {e}")))?;
            at = at.saturating_add(part.len());
        }
        Ok(())
    }

    fn outcome(&mut self, status: i32) -> Result<Outcome, Stop> {
        if !(0..=1).contains(&status) {
            return Err(Stop::Trap(format!(
                "the module refused the request (status {status})"
            )));
        }
        let text = self.result()?;
        let outcome: Outcome = serde_json::from_slice(&text)
            .map_err(|e| Stop::Trap(format!("the module returned invalid JSON: {e}")))?;
        if outcome.ok != (status == 0) {
            return Err(Stop::Trap(
                "the module's status and outcome disagree".into(),
            ));
        }
        Ok(outcome)
    }

    fn result(&mut self) -> Result<Vec<u8>, Stop> {
        // Reading the result costs a few instructions; no budget to track.
        let mut budget = Budget::new(
            FUEL_SLICE,
            Instant::now() + std::time::Duration::from_secs(1),
        );
        let ptr = self.call(&self.result_ptr.clone(), (), &mut budget)?;
        let len = self.call(&self.result_len.clone(), (), &mut budget)?;
        let len = usize::try_from(len as u32).unwrap_or(usize::MAX);
        if len > MAX_RESULT_BYTES {
            return Err(Stop::Trap(format!("the module returned {len} bytes")));
        }
        let mut out = vec![0; len];
        self.memory
            .read(&self.store, ptr as u32 as usize, &mut out)
            .map_err(|e| Stop::Trap(format!("result_ptr is out of bounds: {e}")))?;
        Ok(out)
    }

    /// Calls `func` on fuel slices until it returns, its budget's fuel is
    /// spent or its deadline has passed.
    fn call<P, R>(
        &mut self,
        func: &TypedFunc<P, R>,
        params: P,
        budget: &mut Budget,
    ) -> Result<R, Stop>
    where
        P: wasmi::WasmParams,
        R: wasmi::WasmResults,
    {
        self.store.data_mut().deadline = Some(budget.deadline);
        let mut slice = FUEL_SLICE.min(budget.fuel.saturating_sub(budget.used));
        if slice == 0 {
            return Err(Stop::Fuel);
        }
        self.set_fuel(slice)?;
        let mut state = func
            .call_resumable(&mut self.store, params)
            .map_err(|e| classify(&e))?;
        loop {
            match state {
                TypedResumableCall::Finished(result) => {
                    budget.used = budget
                        .used
                        .saturating_add(slice.saturating_sub(self.store.get_fuel().unwrap_or(0)));
                    return Ok(result);
                }
                TypedResumableCall::HostTrap(trap) => {
                    return Err(classify(trap.host_error()));
                }
                TypedResumableCall::OutOfFuel(pending) => {
                    budget.used = budget.used.saturating_add(slice);
                    let left = budget.fuel.saturating_sub(budget.used);
                    if left == 0 {
                        return Err(Stop::Fuel);
                    }
                    if Instant::now() >= budget.deadline {
                        return Err(Stop::Deadline);
                    }
                    slice = FUEL_SLICE.max(pending.required_fuel()).min(left);
                    self.set_fuel(slice)?;
                    state = pending.resume(&mut self.store).map_err(|e| classify(&e))?;
                }
            }
        }
    }

    fn set_fuel(&mut self, fuel: u64) -> Result<(), Stop> {
        self.store
            .set_fuel(fuel)
            .map_err(|e| Stop::Trap(format!("fuel metering is off: {e}")))
    }
}

fn len_i32(len: usize) -> Result<i32, Stop> {
    i32::try_from(len).map_err(|_| Stop::Trap(format!("a request of {len} bytes is too large")))
}

/// Sorts a wasmi error into the stops the host reports differently.
fn classify(error: &wasmi::Error) -> Stop {
    match error.as_trap_code() {
        Some(TrapCode::OutOfFuel) => return Stop::Fuel,
        Some(TrapCode::GrowthOperationLimited) => return Stop::Memory,
        _ => {}
    }
    if let Some(stop) = error
        .kind()
        .as_host()
        .and_then(|h| (h as &dyn std::any::Any).downcast_ref::<HostStop>())
    {
        return match stop {
            HostStop::Deadline => Stop::Deadline,
            other => Stop::Trap(other.to_string()),
        };
    }
    Stop::Trap(error.to_string())
}
