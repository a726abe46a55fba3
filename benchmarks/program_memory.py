r"""Resident memory each compiled sampler program keeps, on the all-domains job.

    python benchmarks/program_memory.py [--rows=128,64] [--widths=16,32,48,64,96,128,192,256,258]

Builds the trainer of ``experiments/grpo_all_domains.py`` (its model, mesh and
sampler) and samples once per (rows, prompt width) pair, each a shape the
sampler has not compiled yet, then once more at the same shape. After each
call it collects garbage, hands freed heap back to the system
(``malloc_trim``) and reads the process's resident memory. Prints the
increase per first call (a new program) and per second call (no new
program), and their medians: what a long run's memory grows by with each
new shape it meets. Then bounds the programs kept (the run's ProgramPool,
``--keep``) and prints what that hands back. About 2 minutes on 2 CPU cores
(mostly compilation).
"""

import ctypes
import gc
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

_ROWS = flags.DEFINE_list("rows", ["128", "64"], "Sampler batch rows (row buckets of the job).")
_WIDTHS = flags.DEFINE_list("widths", ["16", "32", "48", "64", "96", "128", "192", "256", "258"],
                            "Prompt buffer widths (the job's width ladder).")
_KEEP = flags.DEFINE_integer("keep", 2, "Programs kept after the measure (ProgramPool.resize).")


def main(_):
  from experiments import grpo_all_domains
  from rlpt.config import TrainConfig, from_config_dict
  from rlpt.keys import run_key
  from rlpt.device import resident_mib
  from rlpt.trainer import Trainer

  cd = grpo_all_domains.get_config("")
  cd.progress = False
  cd.checkpoint.every = 0
  cfg = from_config_dict(TrainConfig, cd)
  libc = ctypes.CDLL("libc.so.6")

  def rss() -> float:
    gc.collect()
    libc.malloc_trim(0)
    return resident_mib()

  with tempfile.TemporaryDirectory() as work:
    trainer = Trainer(cfg, work, max_programs=0)  # keep every program while measuring
    programs = trainer.ctx.programs
    try:
      rollout, tok = trainer.rollout, trainer.tokenizer
      new, again = [], []
      prev = rss()
      for rows in map(int, _ROWS.value):
        for width in map(int, _WIDTHS.value):
          if width > cfg.rollout.max_prompt_len:
            raise ValueError(f"--widths: {width} is past rollout.max_prompt_len "
                             f"{cfg.rollout.max_prompt_len}")
          ids = np.full((rows, width), tok.pad_id, np.int32)
          ids[:, 0], ids[:, 1] = tok.bos_id, tok.encode("a")[0]
          lengths = np.full((rows,), 2, np.int32)
          for k, out in ((1, new), (2, again)):
            rollout.samplers.generate(ids, lengths, rollout.sampling,
                                      run_key(cfg.seed, "eval", k, rows * 1000 + width))
            now = rss()
            out.append(now - prev)
            prev = now
          print(f"rows {rows:4d} width {width:4d}: new program {new[-1]:+7.1f} MiB, "
                f"same shape again {again[-1]:+6.1f} MiB", flush=True)
      kept = len(programs)
      programs.resize(_KEEP.value)
      freed = prev - rss()
    finally:
      trainer.close()
  print(f"median over {len(new)} shapes: new program {statistics.median(new):+.1f} MiB "
        f"[{min(new):+.1f} .. {max(new):+.1f}], same shape again "
        f"{statistics.median(again):+.1f} MiB")
  print(f"bounded from {kept} to {len(programs)} programs (the run's ProgramPool): "
        f"{freed:.1f} MiB handed back")


if __name__ == "__main__":
  app.run(main)
