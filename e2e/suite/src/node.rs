//! What the node scenarios (`tests/node.rs`) read besides the API: the
//! container runtime's view of a container (its process, through `ctr`),
//! that process's credentials, mounts and memory cgroup from `/proc` and
//! `/sys/fs/cgroup`, and the certificate a webhook pod serves (`openssl
//! s_client`). They run on the node itself, as root, which `make e2e-node`
//! is.
//!
//! Environment: `SIGIL_E2E_CONTAINERD_SOCK` (the node's containerd socket).

use std::process::Command;

use anyhow::{Context as _, anyhow, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

use crate::Cluster;

/// Runs a command on a blocking thread (the load generator keeps running on
/// the runtime meanwhile); fails with its stderr unless it succeeds.
pub async fn run(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let program = program.to_string();
    let args: Vec<String> = args.iter().map(|a| (*a).to_string()).collect();
    let shown = format!("{program} {}", args.join(" "));
    let output = tokio::task::spawn_blocking(move || Command::new(&program).args(&args).output())
        .await?
        .with_context(|| format!("cannot run {shown}"))?;
    if !output.status.success() {
        bail!(
            "{shown}: {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// One container of a pod, as the API reports it.
#[derive(Debug, Clone)]
pub struct ContainerRef {
    /// The pod's name.
    pub pod: String,
    /// The pod's UID.
    pub pod_uid: String,
    /// The pod's IP.
    pub pod_ip: String,
    /// The container's name.
    pub name: String,
    /// The runtime's container ID (without `containerd://`).
    pub id: String,
    /// The image the pod asks for.
    pub image: String,
    /// The image the runtime ran (`imageID`).
    pub image_id: String,
    /// Restarts so far.
    pub restarts: i64,
    /// Whether the container is ready.
    pub ready: bool,
}

/// The containers of the pods in `namespace` matching `selector`.
pub async fn containers(
    cluster: &Cluster,
    namespace: &str,
    selector: &str,
) -> anyhow::Result<Vec<ContainerRef>> {
    let list = cluster
        .get(&format!(
            "/api/v1/namespaces/{namespace}/pods?labelSelector={selector}"
        ))
        .await?
        .expect_ok("listing pods")?;
    let mut out = Vec::new();
    for pod in list.body["items"].as_array().into_iter().flatten() {
        if !pod["metadata"]["deletionTimestamp"].is_null() {
            continue;
        }
        let s = |v: &Value| v.as_str().unwrap_or("").to_string();
        for (i, c) in pod["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let id = s(&c["containerID"]);
            out.push(ContainerRef {
                pod: s(&pod["metadata"]["name"]),
                pod_uid: s(&pod["metadata"]["uid"]),
                pod_ip: s(&pod["status"]["podIP"]),
                name: s(&c["name"]),
                id: id.strip_prefix("containerd://").unwrap_or(&id).to_string(),
                image: s(&pod["spec"]["containers"][i]["image"]),
                image_id: s(&c["imageID"]),
                restarts: c["restartCount"].as_i64().unwrap_or(0),
                ready: c["ready"].as_bool().unwrap_or(false),
            });
        }
    }
    Ok(out)
}

fn containerd_socket() -> anyhow::Result<String> {
    std::env::var("SIGIL_E2E_CONTAINERD_SOCK")
        .map_err(|_| anyhow!("SIGIL_E2E_CONTAINERD_SOCK is not set: run through e2e/run-node.sh"))
}

/// The host PID of a running container's first process, from containerd.
pub async fn container_pid(container_id: &str) -> anyhow::Result<u32> {
    let socket = containerd_socket()?;
    let tasks = run(
        "ctr",
        &["--address", &socket, "--namespace", "k8s.io", "tasks", "ls"],
    )
    .await?;
    parse_task_pid(&tasks, container_id)
        .ok_or_else(|| anyhow!("containerd has no running task {container_id}:\n{tasks}"))
}

/// The PID of `id` in `ctr tasks ls` output (`TASK PID STATUS`).
pub fn parse_task_pid(tasks: &str, id: &str) -> Option<u32> {
    tasks.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        (f.next() == Some(id))
            .then(|| f.next().and_then(|p| p.parse().ok()))
            .flatten()
            .filter(|_| l.contains("RUNNING"))
    })
}

/// What the kernel enforces on a process, from `/proc/PID/status` and
/// `/proc/PID/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confinement {
    /// Real, effective, saved and filesystem user IDs.
    pub uids: Vec<u32>,
    /// Real, effective, saved and filesystem group IDs.
    pub gids: Vec<u32>,
    /// The effective capability set (hex), `0000000000000000` when empty.
    pub cap_eff: String,
    /// `NoNewPrivs` (allowPrivilegeEscalation: false).
    pub no_new_privs: bool,
    /// `Seccomp` mode: 2 is a filter (RuntimeDefault).
    pub seccomp: u32,
    /// Whether the container's `/` is mounted read-only.
    pub root_read_only: bool,
}

impl Confinement {
    /// Where the process falls short of the hardening sigil's chart asks
    /// for (a read-only root, no capabilities, no privilege escalation, the
    /// RuntimeDefault seccomp filter); empty when it does not.
    pub fn unhardened(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if !self.root_read_only {
            out.push("/ is writable");
        }
        if self.cap_eff != "0000000000000000" {
            out.push("it holds capabilities");
        }
        if !self.no_new_privs {
            out.push("it may gain privileges (NoNewPrivs is 0)");
        }
        if self.seccomp != 2 {
            out.push("no seccomp filter");
        }
        out
    }
}

/// Reads the confinement of process `pid`.
pub fn confinement(pid: u32) -> anyhow::Result<Confinement> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .with_context(|| format!("reading /proc/{pid}/mountinfo"))?;
    parse_confinement(&status, &mountinfo).ok_or_else(|| anyhow!("/proc/{pid} is not as expected"))
}

/// [`confinement`] from the two files' text.
pub fn parse_confinement(status: &str, mountinfo: &str) -> Option<Confinement> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let ids = |name: &str| {
        field(name)?
            .split_whitespace()
            .map(|u| u.parse().ok())
            .collect::<Option<Vec<u32>>>()
    };
    let uids = ids("Uid:")?;
    let gids = ids("Gid:")?;
    // mountinfo: id parent major:minor root mount-point options ...
    let root_read_only = mountinfo.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.get(4) == Some(&"/") && f.get(5).is_some_and(|o| o.split(',').any(|x| x == "ro"))
    });
    Some(Confinement {
        uids,
        gids,
        cap_eff: field("CapEff:")?.to_string(),
        no_new_privs: field("NoNewPrivs:")? == "1",
        seccomp: field("Seccomp:")?.parse().ok()?,
        root_read_only,
    })
}

/// Memory of a container's cgroup (cgroup v1), in bytes.
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    /// `memory.usage_in_bytes` (resident and page cache).
    pub usage: u64,
    /// `total_rss` of `memory.stat` (anonymous memory: the heap).
    pub rss: u64,
}

/// The memory cgroup of process `pid`, as the kubelet made it for its container.
pub fn memory(pid: u32) -> anyhow::Result<Memory> {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .with_context(|| format!("reading /proc/{pid}/cgroup"))?;
    let path = cgroups
        .lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let _ = f.next();
            (f.next()? == "memory").then(|| f.next()).flatten()
        })
        .ok_or_else(|| anyhow!("process {pid} has no memory cgroup (cgroup v1 expected)"))?;
    let dir = format!("/sys/fs/cgroup/memory{path}");
    let usage = std::fs::read_to_string(format!("{dir}/memory.usage_in_bytes"))
        .with_context(|| format!("reading {dir}/memory.usage_in_bytes"))?
        .trim()
        .parse()
        .with_context(|| format!("{dir}/memory.usage_in_bytes is not a number"))?;
    let stat = std::fs::read_to_string(format!("{dir}/memory.stat"))
        .with_context(|| format!("reading {dir}/memory.stat"))?;
    let rss = stat
        .lines()
        .find_map(|l| l.strip_prefix("total_rss "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow!("{dir}/memory.stat has no total_rss"))?;
    Ok(Memory { usage, rss })
}

/// The DER of the first PEM certificate in `text`.
pub fn first_certificate(text: &str) -> Option<Vec<u8>> {
    let start = text.find("-----BEGIN CERTIFICATE-----")?;
    let rest = text.get(start + "-----BEGIN CERTIFICATE-----".len()..)?;
    let end = rest.find("-----END CERTIFICATE-----")?;
    let b64: String = rest
        .get(..end)?
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    STANDARD.decode(b64).ok()
}

/// The leaf certificate (DER) served at `ip:port` for `server_name`.
pub async fn served_certificate(ip: &str, port: u16, server_name: &str) -> anyhow::Result<Vec<u8>> {
    let connect = format!("{ip}:{port}");
    let out = run(
        "openssl",
        &[
            "s_client",
            "-connect",
            &connect,
            "-servername",
            server_name,
            "-showcerts",
        ],
    )
    .await?;
    first_certificate(&out).ok_or_else(|| anyhow!("{connect} served no certificate: {out}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_task_gives_its_pid() {
        let out = "TASK    PID     STATUS\nabc     4242    RUNNING\ndef     17      STOPPED\n";
        assert_eq!(parse_task_pid(out, "abc"), Some(4242));
        assert_eq!(parse_task_pid(out, "def"), None);
        assert_eq!(parse_task_pid(out, "ab"), None);
    }

    #[test]
    fn confinement_reads_ids_capabilities_and_the_root_mount() {
        let status = "Name:\tsigil\nUid:\t65532\t65532\t65532\t65532\nGid:\t7\t7\t7\t7\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n";
        let mounts = "600 500 0:50 / / ro,relatime - overlay overlay rw,lowerdir=x\n601 600 0:51 / /proc rw - proc proc rw\n";
        let c = parse_confinement(status, mounts).unwrap();
        assert_eq!(c.uids, vec![65532; 4]);
        assert_eq!(c.gids, vec![7; 4]);
        assert_eq!(c.cap_eff, "0000000000000000");
        assert!(c.no_new_privs);
        assert_eq!(c.seccomp, 2);
        assert!(c.root_read_only);
        assert!(c.unhardened().is_empty(), "{c:?}");
        let writable = "600 500 0:50 / / rw,relatime - overlay overlay rw\n";
        let open = parse_confinement(status, writable).unwrap();
        assert!(!open.root_read_only);
        assert_eq!(open.unhardened(), ["/ is writable"]);
        let loose = status
            .replace("CapEff:\t0000000000000000", "CapEff:\t00000000a80425fb")
            .replace("NoNewPrivs:\t1", "NoNewPrivs:\t0")
            .replace("Seccomp:\t2", "Seccomp:\t0");
        assert_eq!(
            parse_confinement(&loose, mounts).unwrap().unhardened(),
            [
                "it holds capabilities",
                "it may gain privileges (NoNewPrivs is 0)",
                "no seccomp filter"
            ]
        );
    }

    #[test]
    fn the_first_pem_certificate_is_decoded() {
        let text = "depth=0\n-----BEGIN CERTIFICATE-----\nAAEC\nAw==\n-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n";
        assert_eq!(first_certificate(text), Some(vec![0, 1, 2, 3]));
        assert_eq!(first_certificate("none"), None);
    }
}
