"""transformers' ``generate`` on an rlpt job's rollout batch: the figure to set
beside rlpt's sampler (``benchmarks/rl_step.py`` prints its tokens/s for the
same config).

    .peers/trl/bin/python benchmarks/peers/generate_hf.py \
        --inputs=runs/peers_smollm2/seed0/trl/trl_inputs.json \
        --model_dir=.cache/rlpt/bases/warmup_hf-smollm2-135m-instruct-<fp>/model

It takes the training prompts of the first ``--steps`` steps from the inputs
main_job.py wrote for TRL (rlpt's prompt ids, so the same tokens), and per
step samples the job's group for each prompt as one batch (left-padded, the
job's temperature, top-k 0, top-p 1, stopping rows at the stop ids and the
batch when every row has stopped, as rlpt's sampler does), fp32, ``--threads``
torch threads. Prints the generated tokens (up to each row's stop), the
seconds and tokens/s of each step after the first (a warm-up), and their
median; ``--full`` makes every row run to max_new_tokens (min_new_tokens), the
decode's fixed-length rate.
"""

import argparse
import json
import statistics
import time

import torch
from transformers import AutoModelForCausalLM


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  parser.add_argument("--inputs", required=True, help="trl_inputs.json written by main_job.py.")
  parser.add_argument("--model_dir", required=True, help="The Hugging Face checkpoint.")
  parser.add_argument("--steps", type=int, default=5, help="Steps (batches) timed, the first a warm-up.")
  parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads.")
  parser.add_argument("--full", action="store_true", help="Every row to max_new_tokens.")
  args = parser.parse_args()
  torch.set_num_threads(args.threads)
  torch.manual_seed(0)
  with open(args.inputs) as f:
    inputs = json.load(f)
  job = inputs["job"]
  per_step, group, new = job["per_step"], job["group"], job["max_new_tokens"]
  ids = inputs["prompts"]["train"]["ids"]
  if len(ids) < args.steps * per_step:
    raise SystemExit(f"--steps={args.steps} needs {args.steps * per_step} prompts; the inputs "
                     f"hold {len(ids)}.")
  model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32).eval()
  stops, pad = list(job["stop_ids"]), job["pad_id"]
  rates, rows = [], []
  for step in range(args.steps):
    prompts = [p for p in ids[step * per_step:(step + 1) * per_step] for _ in range(group)]
    width = max(len(p) for p in prompts)
    x = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    t = time.perf_counter()
    with torch.no_grad():
      out = model.generate(input_ids=x, attention_mask=mask, max_new_tokens=new,
                           min_new_tokens=new if args.full else 0, do_sample=True,
                           temperature=job["temperature"], top_k=0, top_p=1.0,
                           eos_token_id=stops, pad_token_id=pad, use_cache=True)
    seconds = time.perf_counter() - t
    made = 0
    for row in out[:, width:].tolist():
      stop = next((i for i, tok in enumerate(row) if tok in stops), None)
      made += len(row) if stop is None else stop + 1
    print(f"step {step}: {len(prompts)} rows, prompt width {width}, {made} tokens in "
          f"{seconds:.2f} s: {made / seconds:.1f} tokens/s" + (" (warm-up)" if step == 0 else ""),
          flush=True)
    if step:
      rates.append(made / seconds)
      rows.append(seconds)
  print(f"median over steps 1-{args.steps - 1}: {statistics.median(rates):.1f} tokens/s "
        f"[{min(rates):.1f}-{max(rates):.1f}], {statistics.median(rows):.2f} s a batch of "
        f"{per_step * group}")


if __name__ == "__main__":
  main()
