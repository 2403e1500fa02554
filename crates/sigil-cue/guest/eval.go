// The evaluation itself, the same on every platform: cosign v3.0.5's
// evaluateCue (pkg/policy/eval.go), which sigstore policy-controller v0.15.1
// calls for attestation and ClusterImagePolicy-level CUE policies. Its steps
// and their error texts are kept exactly, because users' alerts and
// policy-controller's own tests match on them; the structured error list is
// sigil's addition, so that a denial can point at the policy's line.
package main

import (
	"fmt"
	"strings"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/cue/errors"
)

// policyFile names the policy text in positions, so that positions inside the
// policy can be told apart from positions inside the document (which has no
// name, as in cosign). A file name changes nothing else: it only labels the
// source of the parsed file.
const policyFile = "policy.cue"

// Stages of an evaluation that can fail, as cosign names them in its messages.
const (
	stagePolicy = "policy"
	stageInput  = "input"
	stageEval   = "eval"
)

// outcome is what the host reads back, as JSON.
type outcome struct {
	// OK is true when the policy passed (or compiled, for compile).
	OK bool `json:"ok"`
	// Stage is where it failed: policy, input or eval.
	Stage string `json:"stage,omitempty"`
	// Message is cosign's error text, e.g. "failed to evaluate the policy
	// with error: predicate.Data: conflicting values ...".
	Message string `json:"message,omitempty"`
	// Errors lists every CUE error, not only the first that Message shows.
	Errors []detail `json:"errors,omitempty"`
}

// detail is one CUE error.
type detail struct {
	Path      string     `json:"path"`
	Message   string     `json:"message"`
	Positions []position `json:"positions,omitempty"`
}

// position is a place in the policy text (1-based).
type position struct {
	Line   int `json:"line"`
	Column int `json:"column"`
}

func failure(stage, prefix string, err error) outcome {
	return outcome{
		Stage:   stage,
		Message: fmt.Sprintf("%s: %v", prefix, err),
		Errors:  details(err),
	}
}

func details(err error) []detail {
	var out []detail
	for _, e := range errors.Errors(err) {
		format, args := e.Msg()
		d := detail{
			Path:    strings.Join(e.Path(), "."),
			Message: fmt.Sprintf(format, args...),
		}
		for _, p := range errors.Positions(e) {
			if p.Filename() == policyFile {
				d.Positions = append(d.Positions, position{Line: p.Line(), Column: p.Column()})
			}
		}
		out = append(out, d)
	}
	return out
}

// compilePolicy is cosign's first step alone: the policy must compile, and
// its value must not be an error, before any document is seen.
func compilePolicy(policy string) outcome {
	ctx := cuecontext.New()
	if err := ctx.CompileString(policy, cue.Filename(policyFile)).Err(); err != nil {
		return failure(stagePolicy, "failed to compile the cue policy with error", err)
	}
	return outcome{OK: true}
}

// evaluate is cosign's evaluateCue: a fresh context per evaluation, the
// policy compiled alone, the document compiled as CUE source (JSON is CUE),
// the two unified and validated with no options (neither concrete nor
// final, so constraints on absent fields pass).
func evaluate(policy string, document []byte) outcome {
	ctx := cuecontext.New()
	p := ctx.CompileString(policy, cue.Filename(policyFile))
	if err := p.Err(); err != nil {
		return failure(stagePolicy, "failed to compile the cue policy with error", err)
	}
	d := ctx.CompileBytes(document)
	if err := d.Err(); err != nil {
		return failure(stageInput, "failed to compile the attestation data with error", err)
	}
	if err := p.Unify(d).Validate(); err != nil {
		return failure(stageEval, "failed to evaluate the policy with error", err)
	}
	return outcome{OK: true}
}
