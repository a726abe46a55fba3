"""The real models' prompt formats, from the GGUF files launch/models.txt pins
(make setup installs them; without them these tests skip, naming the pip
command): SmolLM2-135M-Instruct's ChatML episodes are exactly transformers'
``apply_chat_template`` on the same messages (transformers reads the same
file's tokenizer and Jinja template with its own GGUF loader), and Gemma 3's
base, which has no template, gets bare prompts with its BOS.
"""

import os

import pytest

pytest.importorskip("gguf")
pytest.importorskip("jinja2")
transformers = pytest.importorskip("transformers")

from rlpt.models.gguf import resolve_gguf  # noqa: E402
from rlpt.tokenizers.chat import TEMPLATES, after_stop_ids  # noqa: E402
from rlpt.tokenizers.prompts import prompt_format  # noqa: E402
from rlpt.tokenizers.gguf import GGUFTokenizer  # noqa: E402

SMOLLM2 = "smollm2-135m-instruct"
# What SmolLM2-Instruct's Jinja template puts first when a conversation has no system message.
SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
PROMPT = "2*52="
# (text, whether the policy stopped on <|im_end|>): the second turn was cut at max_new_tokens.
ANSWERS = [("104", True), ("The product of 2 and 52 is 10", False), ("104.", True)]
# Feedback as rlpt's environments send it (TaskEnv: "\n<VERDICT>: <feedback>\n<retry cue>").
OBSERVATIONS = ["\nFAIL: expected 104, got 10\nTry again. 2*52=", "\nFAIL: no number found\n2*52="]


def _path(name: str) -> str:
  try:
    return resolve_gguf(name)
  except ModuleNotFoundError as e:
    pytest.skip(str(e))


@pytest.fixture(scope="module")
def smollm2():
  path = _path(SMOLLM2)
  ref = transformers.AutoTokenizer.from_pretrained(os.path.dirname(path),
                                                   gguf_file=os.path.basename(path))
  return GGUFTokenizer(SMOLLM2), ref


def _reference(ref, messages, generation_prompt):
  out = ref.apply_chat_template(messages, tokenize=True, add_generation_prompt=generation_prompt,
                                return_dict=True)
  return list(out["input_ids"])


@pytest.mark.parametrize("system", ["", "You are a terse calculator."])
def test_smollm2_three_turn_episode_equals_apply_chat_template(smollm2, system):
  """rlpt's ids at each of the three model turns (prompt; first answer, ended
  on <|im_end|>, then feedback as a user turn; second answer, cut at
  max_new_tokens so the whole close follows it, then feedback; the third
  answer ending the episode) equal transformers' on the same messages. With no
  system prompt both put SmolLM2's default system turn first."""
  tok, ref = smollm2
  fmt = prompt_format(tok, "auto", system)
  assert fmt.name == "chatml" and fmt.system == (system or SMOLLM2_SYSTEM)
  messages = [{"role": "system", "content": system}] if system else []
  messages.append({"role": "user", "content": PROMPT})
  ids = fmt.prompt_ids(PROMPT)
  assert ids == _reference(ref, messages, True)
  for k, (text, stopped) in enumerate(ANSWERS):
    ids += tok.encode(text) + ([fmt.end_of_turn] if stopped else [])
    messages.append({"role": "assistant", "content": text})
    if k < len(OBSERVATIONS):
      ids += fmt.observation_ids(OBSERVATIONS[k], ids[-1])
      messages.append({"role": "user", "content": OBSERVATIONS[k]})
      assert ids == _reference(ref, messages, True), f"after turn {k + 1}"
  assert ids + after_stop_ids(tok, TEMPLATES["chatml"]) == _reference(ref, messages, False)


def test_smollm2_stops_at_its_end_of_turn_token(smollm2):
  tok, ref = smollm2
  fmt = prompt_format(tok)
  im_end = tok.token_id("<|im_end|>")
  # SmolLM2's EOS is its end-of-turn token: one stop id.
  assert fmt.stop_ids == (im_end,) == (tok.eos_id,)
  assert ref.convert_tokens_to_ids("<|im_end|>") == im_end == ref.eos_token_id
  # A turn that stopped continues after the newline the template puts after
  # <|im_end|>; one cut short gets the whole close.
  stopped = fmt.observation_ids("x", im_end)
  cut = fmt.observation_ids("x", tok.encode("4")[0])
  assert cut == [im_end] + stopped
  assert tok.decode(stopped, skip_special=False) == "\n<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"


def test_gemma3_base_has_no_template_so_prompts_are_bare_with_its_bos():
  _path("gemma3-270m")
  tok = GGUFTokenizer("gemma3-270m")
  assert tok.chat_template is None and tok.has_bos
  fmt = prompt_format(tok)
  assert fmt.name == "bare" and fmt.stop_ids == (tok.eos_id,)
  assert fmt.prompt_ids(PROMPT) == [tok.token_id("<bos>")] + tok.encode(PROMPT)
  assert fmt.observation_ids(OBSERVATIONS[0], tok.eos_id) == tok.encode(OBSERVATIONS[0])
