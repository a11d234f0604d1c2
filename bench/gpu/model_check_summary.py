#!/usr/bin/env python3
"""One line per sample of a `crucible eval --model` run: the op's status and speedup, then what
the model check measured (docs/models.md): the step's speedup with its 95 % interval, the op's
share of the reference step and its speedup in place, the hidden states' difference and, with
trained weights, the greedy tokens' agreement."""
import json
import sys


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    for row in rows:
        line = f"{row['sample_id']:<44} {row['status']:<14}"
        if isinstance(row.get("speedup"), (int, float)):
            line += f" op x{row['speedup']:.3f}"
        model = row.get("model")
        if model is None:
            print(line + " (no model check)")
            continue
        if "error" in model:
            print(line + f" model check error: {model['error']}")
            continue
        ci = model.get("step_speedup_ci95", {})
        line += (f" | step {model['reference_step_ns'] / 1e3:.1f} -> {model['candidate_step_ns'] / 1e3:.1f} us"
                 f" x{model['step_speedup']:.4f} [{ci.get('low', 0):.4f}, {ci.get('high', 0):.4f}]"
                 f" n={model['samples']} share {model['op_share']:.3f}")
        if "op_speedup" in model:
            line += f" op-in-step x{model['op_speedup']:.3f}"
        hidden = model.get("hidden_state", {})
        line += f" | hidden rel_l2 {hidden.get('rel_l2', float('nan')):.2e} top1 {hidden.get('top1_agreement', float('nan')):.2f}"
        tokens = model.get("tokens")
        if tokens:
            line += f" | tokens {tokens['agreement']:.3f} first divergence {tokens['first_divergence']}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
