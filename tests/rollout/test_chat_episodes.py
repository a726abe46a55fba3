"""EpisodeRunner with the model's chat template, and with bare prompts.

A multi-turn domain (string reversal, three attempts: wrong answers come back
as feedback) played by a scripted sampler on a byte-level tokenizer with
ChatML's special tokens and a ChatML Jinja template of our own (a default
system turn, ``{% generation %}`` around what the assistant emits). The
recorded conversations must be exactly what transformers'
``apply_chat_template`` renders for the same messages, the sampler must be
asked to continue from exactly its generation prompt at every turn, and the
loss mask must cover the sampled tokens only (with their <|im_end|>): never a
header, the system turn, a prompt or an observation. Batch-synchronous,
interleaved and engine play lay episodes out alike. Without a template the
ids are the bare ones rlpt always built.
"""

import json
import os
import threading

import gymnasium
import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")
transformers = pytest.importorskip("transformers")

from rlpt.config import EnvConfig, EvalConfig, RolloutConfig  # noqa: E402
from rlpt.data import Task  # noqa: E402
from rlpt.engine.sequence import Turn  # noqa: E402
from rlpt.evaluation import Evaluator  # noqa: E402
from rlpt.models.hf_fixtures import write_byte_tokenizer  # noqa: E402
from rlpt.rollout import EnvPool  # noqa: E402
from rlpt.rollout.batch import encode_prompts  # noqa: E402
from rlpt.rollout.episodes import EpisodeRunner  # noqa: E402
from rlpt.sampling import SamplingParams  # noqa: E402
from rlpt.tokenizers import ByteTokenizer  # noqa: E402
from rlpt.tokenizers.prompts import PromptFormat, prompt_format  # noqa: E402
from rlpt.tokenizers.hf import load_tokenizer  # noqa: E402

REVERSE = "rlpt/strings-reverse-easy-v0"
ATTEMPTS = 3
MAX_NEW = 4
CHATML = (
    r"{%- for message in messages %}"
    r"{%- if loop.first and messages[0]['role'] != 'system' %}"
    r"{{- '<|im_start|>system\nYou are a careful tutor.<|im_end|>\n' }}{%- endif %}"
    r"{{- '<|im_start|>' + message['role'] + '\n' }}"
    r"{%- if message['role'] == 'assistant' %}{% generation %}"
    r"{{- message['content'] + '<|im_end|>' }}{% endgeneration %}"
    r"{%- else %}{{- message['content'] + '<|im_end|>' }}{%- endif %}{{- '\n' }}"
    r"{%- endfor %}"
    r"{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}")
# Turn t's answer (text, whether it ends on the end-of-turn token): the second
# is cut at max_new_tokens (MAX_NEW bytes, no <|im_end|>).
ANSWERS = [("zz", True), ("abcd", False), ("yy", True)]


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
  d = str(tmp_path_factory.mktemp("chatml_bytes"))
  write_byte_tokenizer(d, extra_special=("<|im_start|>", "<|im_end|>"))
  with open(os.path.join(d, "tokenizer_config.json")) as f:
    config = json.load(f)
  config["chat_template"] = CHATML
  with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
    json.dump(config, f)
  tok = load_tokenizer(d)
  return tok, prompt_format(tok), transformers.AutoTokenizer.from_pretrained(d)


class Recorded(gymnasium.Wrapper):
  """Records every observation its environment sends, by task seed."""

  def __init__(self, env, book):
    super().__init__(env)
    self.book = book

  def reset(self, *, seed=None, options=None):
    self.seed = seed
    obs, info = self.env.reset(seed=seed, options=options)
    self.book[seed] = {"prompt": obs, "observations": []}
    return obs, info

  def step(self, action):
    obs, reward, terminated, truncated, info = self.env.step(action)
    if not (terminated or truncated):
      self.book[self.seed]["observations"].append(obs)
    return obs, reward, terminated, truncated, info


class RecordingPool(EnvPool):
  def __init__(self, *args, **kw):
    self.book = {}
    super().__init__(*args, **kw)

  def make_env(self, domain):
    return Recorded(super().make_env(domain), self.book)


class ScriptedSampler:
  """generate(): each row answers ANSWERS[turn], the turn read off its context
  (how many assistant headers it holds); records every context it is given."""

  def __init__(self, tok, fmt):
    self.tok, self.fmt, self.lock, self.contexts = tok, fmt, threading.Lock(), []
    self.start = tok.token_id("<|im_start|>")

  def answer(self, context) -> list[int]:
    turn = (list(context).count(self.start) - 3) // 2  # system, user, assistant; then user, assistant
    text, stopped = ANSWERS[turn]
    return self.tok.encode(text) + ([self.fmt.end_of_turn] if stopped else [])

  def __call__(self, ids, lengths, grouped, key):
    comp = np.full((len(ids), MAX_NEW), self.tok.pad_id, np.int32)
    n = np.zeros((len(ids),), np.int32)
    for r, (row, length) in enumerate(zip(ids, lengths)):
      with self.lock:
        self.contexts.append([int(x) for x in row[:length]])
      body = self.answer(row[:length])
      comp[r, :len(body)], n[r] = body, len(body)
    logp = np.where(np.arange(MAX_NEW)[None] < n[:, None], -0.5, 0.0).astype(np.float32)
    return comp, logp, n


class ScriptedEngine:
  """The engine's interface (add, extend, finish, running, step) over the
  scripted sampler; keeps each sequence's conversation as the engine holds it."""

  def __init__(self, sampler):
    self.sampler, self.held, self.queue, self.finished = sampler, {}, [], {}

  @property
  def running(self) -> int:
    return len(self.queue)

  def add(self, i, prompt, key, max_new_tokens):
    self.held[i] = [int(x) for x in prompt]
    self.queue.append(i)

  def extend(self, i, observation, key, max_new_tokens):
    self.held[i] += [int(x) for x in observation]
    self.queue.append(i)

  def finish(self, i):
    self.finished[i] = self.held[i]
    return self.held[i]

  def step(self):
    turns = []
    for i in self.queue:
      self.sampler.contexts.append(list(self.held[i]))
      body = self.sampler.answer(self.held[i])
      self.held[i] += body
      turns.append(Turn(i, np.array(body, np.int32), np.full(len(body), -0.5, np.float32),
                        np.zeros(len(body), np.int32), body[-1] in self.sampler.fmt.stop_ids))
    self.queue = []
    return turns


def _play(tok, fmt, mode, sampler):
  pool = RecordingPool([REVERSE], EnvConfig(workers=2), max_attempts=ATTEMPTS)
  try:
    rollout = RolloutConfig(max_prompt_len=512, max_new_tokens=MAX_NEW,
                            interleave_turns=mode == "interleaved")
    runner = EpisodeRunner(pool, fmt, rollout, fmt.stop_ids, 16)
    tasks = [Task(REVERSE, s, "train") for s in range(3)]
    if mode == "engine":
      engine = ScriptedEngine(sampler)
      out = runner.run_on_engine(tasks, engine, engine.step, lambda i, t: None)
      for i, held in engine.finished.items():  # what the engine prefilled and sampled
        assert held == [int(x) for x in out.seq.tokens[i][:len(held)]]
    else:
      out = runner.run(tasks, sampler)
    return out, tasks, pool.book
  finally:
    pool.close()


def _reference(ref, messages, generation_prompt, mask=False):
  return ref.apply_chat_template(messages, tokenize=True, add_generation_prompt=generation_prompt,
                                 return_dict=True, return_assistant_tokens_mask=mask)


@pytest.mark.parametrize("mode", ["synchronous", "interleaved", "engine"])
def test_chat_episodes_are_the_templates_ids_and_train_on_sampled_tokens_only(chat, mode):
  tok, fmt, ref = chat
  assert fmt.name == "chatml" and fmt.system == "You are a careful tutor."
  assert fmt.stop_ids == (tok.token_id("<|im_end|>"), tok.eos_id)
  sampler = ScriptedSampler(tok, fmt)
  out, tasks, book = _play(tok, fmt, mode, sampler)
  wants = []
  for i, task in enumerate(tasks):
    record = book[task.seed]
    assert len(record["observations"]) == ATTEMPTS - 1 and out.stats["turns"][i] == ATTEMPTS
    messages = [{"role": "user", "content": record["prompt"]}]
    for (text, _), obs in zip(ANSWERS, record["observations"] + [None]):
      # The model continues from exactly the template's generation prompt.
      wants.append(list(_reference(ref, messages, True)["input_ids"]))
      messages.append({"role": "assistant", "content": text})
      if obs is not None:
        messages.append({"role": "user", "content": obs})
    full = _reference(ref, messages, False, mask=True)
    ids, mask = list(full["input_ids"]), list(full["assistant_masks"])
    # The episode ends on its last <|im_end|>; the template adds only "\n".
    n = len(ids) - 1
    assert ids[n:] == tok.encode("\n")
    row = out.seq.tokens[i]
    assert [int(x) for x in row[:n]] == ids[:n]
    assert (row[n:] == tok.pad_id).all()
    # The template marks each assistant turn's text and <|im_end|>; the cut
    # turn's <|im_end|> was appended, not sampled, so it carries no loss.
    runs = [j for j in range(n) if mask[j] and not mask[j + 1]]
    assert len(runs) == len(ANSWERS)
    for (text, stopped), end in zip(ANSWERS, runs):
      assert ids[end] == fmt.end_of_turn
      mask[end] = int(stopped)
    trained = np.concatenate([[0.0], out.seq.loss_mask[i][:n - 1]])
    np.testing.assert_array_equal(trained, mask[:n])
    np.testing.assert_array_equal(out.seq.logp[i][:n - 1], -0.5 * out.seq.loss_mask[i][:n - 1])
    assert bool(out.stats["stopped"][i]) and out.stats["last_len"][i] == 3
  assert sorted(sampler.contexts) == sorted(wants)


def test_evaluator_shows_the_prompt_text_and_the_sampled_answers(chat):
  tok, fmt, _ = chat
  ev = Evaluator(EvalConfig(tasks_per_domain=2), (REVERSE,), seed=0, batch_size=2,
                 modes=(SamplingParams(0.0), SamplingParams(1.0)), prompt_format=fmt)
  books = {}

  def play(tasks, sampling, key):
    out, _, book = _play(tok, fmt, "synchronous", ScriptedSampler(tok, fmt))
    books.update(book)
    return out
  tasks = [Task(REVERSE, s, "train") for s in range(2)]
  for task, got in zip(tasks, ev.answers(play, tasks, step=0)):
    assert got["prompt"] == books[task.seed]["prompt"]
    assert got["answer"] == "".join(text for text, _ in ANSWERS)


def test_bare_episodes_are_bos_prompt_then_bytes(tmp_path):
  """The byte-level base keeps the ids rlpt always built: BOS + prompt bytes,
  each answer's bytes and EOS, each observation's bytes; loss on the answers."""
  tok = ByteTokenizer()

  class Bare(ScriptedSampler):
    def __init__(self):
      self.tok, self.lock, self.contexts = tok, threading.Lock(), []

    def answer(self, context):
      return list(b"zz") + [tok.eos_id]

  for fmt in (PromptFormat(tok), prompt_format(tok), prompt_format(tok, "none")):
    pool = RecordingPool([REVERSE], EnvConfig(workers=2), max_attempts=2)
    try:
      runner = EpisodeRunner(pool, fmt, RolloutConfig(max_prompt_len=512, max_new_tokens=MAX_NEW),
                             (tok.eos_id,), 16)
      assert runner.format.name == "bare"
      tasks = [Task(REVERSE, s, "train") for s in range(2)]
      out = runner.run(tasks, Bare())
    finally:
      pool.close()
    for i, task in enumerate(tasks):
      record = pool.book[task.seed]
      want = [257, *record["prompt"].encode(), *b"zz", 258, *record["observations"][0].encode(),
              *b"zz", 258]
      want_mask = ([0] * (1 + len(record["prompt"].encode())) + [1, 1, 1]
                   + [0] * len(record["observations"][0].encode()) + [1, 1, 1])
      assert [int(x) for x in out.seq.tokens[i][:len(want)]] == want
      assert (out.seq.tokens[i][len(want):] == tok.pad_id).all()
      np.testing.assert_array_equal(out.seq.loss_mask[i][:len(want) - 1], want_mask[1:])
  ids, lengths = encode_prompts(["rev ab=", "x"], tok, 64, bucket=16)
  assert ids[0, :8].tolist() == [257, *b"rev ab="] and lengths.tolist() == [8, 2]


def test_the_runner_refuses_a_sampler_that_misses_the_formats_stop_token(chat):
  tok, fmt, _ = chat
  with pytest.raises(ValueError, match=r"sampler stops at \[.*\], not at every stop token of the "
                                       r"'chatml' prompt format"):
    EpisodeRunner(None, fmt, RolloutConfig(), (tok.eos_id,), 16)
