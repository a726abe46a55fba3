"""A Hugging Face checkpoint with a chat template, through the whole run: the
rollout source builds its prompt format from ``rollout.chat_template="auto"``
(experiments/grpo_hf_import.py), the jitted sampler stops at the template's
end-of-turn token, multi-turn episodes come back laid out in the template
with loss on sampled tokens only, an update trains on them, and the
evaluator shows the prompts' text.

The checkpoint is the tiny random Llama of rlpt.models.hf_fixtures with a
byte-level tokenizer that also has ChatML's special tokens and a ChatML Jinja
template of our own (a default system turn, as SmolLM2-Instruct's).
"""

import json
import os

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

from experiments import grpo_hf_import  # noqa: E402
from rlpt.config import TrainConfig, from_config_dict  # noqa: E402
from rlpt.data import Task  # noqa: E402
from rlpt.models.hf_fixtures import make_tiny_llama, write_byte_tokenizer  # noqa: E402
from rlpt.tokenizers.chat import TEMPLATES, generation_prompt_ids  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REVERSE = "rlpt/strings-reverse-easy-v0"
CHATML = (
    r"{%- for message in messages %}"
    r"{%- if loop.first and messages[0]['role'] != 'system' %}"
    r"{{- '<|im_start|>system\nYou are a careful tutor.<|im_end|>\n' }}{%- endif %}"
    r"{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    r"{%- endfor %}"
    r"{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}")


@pytest.mark.slow
def test_a_chat_checkpoint_plays_and_trains_in_its_template(tmp_path, monkeypatch):
  monkeypatch.chdir(ROOT)
  from rlpt.trainer import Trainer
  d = make_tiny_llama(str(tmp_path / "chat-llama"))
  write_byte_tokenizer(d, extra_special=("<|im_start|>", "<|im_end|>"))
  with open(os.path.join(d, "tokenizer_config.json")) as f:
    config = json.load(f)
  with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
    json.dump({**config, "chat_template": CHATML}, f)
  cd = grpo_hf_import.get_config("smoke")
  assert cd.rollout.chat_template == "auto"
  cd.base.hf_checkpoint = d
  cd.domains.ids = [REVERSE]
  cd.rollout.update(max_attempts=2, max_prompt_len=256, max_new_tokens=8)
  cd.update(progress=False, steps=1)
  cd.checkpoint.every = 0
  trainer = Trainer(from_config_dict(TrainConfig, cd), str(tmp_path / "run"))
  try:
    tok, source = trainer.tokenizer, trainer.rollout
    fmt = source.prompt_format
    im_start, im_end = tok.token_id("<|im_start|>"), tok.token_id("<|im_end|>")
    assert fmt.name == "chatml" and fmt.system == "You are a careful tutor."
    assert fmt.stop_ids == (im_end, tok.eos_id)
    assert source.samplers.sampler.stop_ids == fmt.stop_ids == tuple(sorted(
        source.episode_runner.stop_ids, key=fmt.stop_ids.index))

    tasks = [Task(REVERSE, s, "train") for s in range(cd.rollout.batch_size)]
    prompts = [p.text for p in source.pool.reset(tasks)]
    played = source.episodes(tasks, source.sampling)
    user, reply = generation_prompt_ids(tok, TEMPLATES["chatml"], "user"), list(fmt.suffix)
    newline = tok.encode("\n")
    for i, prompt in enumerate(prompts):
      # An episode ends on a sampled turn (the policy may sample PAD too).
      n = int(np.nonzero(played.seq.loss_mask[i])[0].max()) + 2
      row = [int(x) for x in played.seq.tokens[i][:n]]
      mask = [0.0] + [float(m) for m in played.seq.loss_mask[i][:n - 1]]
      assert (played.seq.tokens[i][n:] == tok.pad_id).all()
      start = fmt.prompt_ids(prompt)
      assert row[:len(start)] == start and not any(mask[:len(start)])
      # Then, turn after turn: what the policy sampled (all of it in the loss,
      # ended by a stop token unless cut at max_new_tokens), then the close it
      # lacks, a user turn and the assistant's header (none in the loss).
      j, turns = len(start), 0
      while j < len(row):
        k = next((m for m in range(j, len(row)) if not mask[m]), len(row))
        sampled = row[j:k]
        assert 0 < len(sampled) <= 8
        assert not set(sampled[:-1]) & set(fmt.stop_ids)  # the sampler stopped at the first
        assert len(sampled) == 8 or sampled[-1] in fmt.stop_ids
        turns, j = turns + 1, k
        if j == len(row):
          break
        k = next((m for m in range(j, len(row)) if mask[m]), len(row))
        close = newline if sampled[-1] == im_end else [im_end, *newline]
        between = row[j:k]
        assert between[:len(close) + len(user)] == close + user and between[-len(reply):] == reply
        assert im_start not in between[len(close) + len(user):-len(reply)]
        j = k
      assert turns == played.stats["turns"][i] >= 1

    metrics = trainer.train_step()
    assert metrics["rollout/turns"] >= 1
    shown = trainer.answers(tasks[:2])
    assert [a["prompt"] for a in shown] == prompts[:2]
  finally:
    trainer.close()
