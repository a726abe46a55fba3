"""rlpt.tokenizers.prompts.PromptFormat against transformers' apply_chat_template.

Tokenizers trained here from a few sentences, each with a Jinja chat template
of our own writing modelled on a family's (ChatML with a default system turn
as SmolLM2's and Qwen2.5's; Llama 3.1's dated system header and trimmed
texts; Gemma 3's system text inside the first user turn). transformers loads
the same directory and renders the same messages with its own Jinja
environment: the ids rlpt builds for a multi-turn episode (sampled turns
appended as sampled, observations as user turns) must be exactly its ids.
"""

import json
import os

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")
transformers = pytest.importorskip("transformers")

from rlpt.config import ConfigError, RolloutConfig  # noqa: E402
from rlpt.config.rl_sections import CHAT_TEMPLATES  # noqa: E402
from rlpt.tokenizers import ByteTokenizer  # noqa: E402
from rlpt.tokenizers.chat import TEMPLATES, after_stop_ids  # noqa: E402
from rlpt.tokenizers.prompts import (CHAT_TEMPLATE_CHOICES, PromptFormat, prompt_format, read_jinja,  # noqa: E402
                                     render_jinja)
from rlpt.tokenizers.hf import load_tokenizer  # noqa: E402

SENTENCES = [
    "What is 17 plus 25? The answer is 42.",
    "Reverse the word banana: ananab.",
    "FAIL: expected 104, got 10. Try again.",
    "You are terse. You are a careful tutor.",
    "Cutting Knowledge Date: December 2023. Today Date: 26 Jul 2024.",
] * 4

# Modelled on SmolLM2-Instruct's and Qwen2.5's: a default system turn when none is given.
CHATML = (
    r"{%- for message in messages %}"
    r"{%- if loop.first and messages[0]['role'] != 'system' %}"
    r"{{- '<|im_start|>system\nYou are a careful tutor.<|im_end|>\n' }}{%- endif %}"
    r"{{- '<|im_start|>' + message['role'] + '\n' }}{% generation %}"
    r"{{- message['content'] + '<|im_end|>' }}{% endgeneration %}{{- '\n' }}"
    r"{%- endfor %}"
    r"{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}")
# Modelled on Llama 3.1's: a dated system header always, the run's system text after it, texts trimmed.
LLAMA3 = (
    "{{- bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set system_message = messages[0]['content']|trim %}\n"
    "    {%- set messages = messages[1:] %}\n"
    "{%- else %}\n"
    "    {%- set system_message = \"\" %}\n"
    "{%- endif %}\n"
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n"
    "{{- \"Today Date: 26 Jul 2024\\n\\n\" }}\n"
    "{{- system_message }}\n"
    "{{- \"<|eot_id|>\" }}\n"
    "{%- for message in messages %}\n"
    "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
    "{%- endif %}\n")
# Modelled on Gemma 3's: no system role (its text opens the first user turn), "model", texts trimmed.
GEMMA = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if message['role'] == 'assistant' -%}{%- set role = \"model\" -%}\n"
    "    {%- else -%}{%- set role = message['role'] -%}{%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {{- message['content'] | trim }}\n"
    "    {{- '<end_of_turn>\\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}\n")

FAMILIES = {
    # name: (specials, bos, eos, pad, jinja)
    "chatml": (("<|endoftext|>", "<|im_start|>", "<|im_end|>"), None, "<|endoftext|>",
               "<|endoftext|>", CHATML),
    "llama3": (("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                "<|eot_id|>"), "<|begin_of_text|>", "<|eot_id|>", "<|end_of_text|>", LLAMA3),
    "gemma": (("<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"), "<bos>", "<eos>",
              "<pad>", GEMMA),
}
PROMPT = "What is 17 plus 25?"
# (text, whether the policy stopped on the end-of-turn token): the second turn
# was cut at max_new_tokens, so the template's close is appended for it.
ANSWERS = [("104", True), ("The answer is 10", False), ("42", True)]
# Observations as environments send them (rlpt's feedback starts with a newline).
OBSERVATIONS = ["\nFAIL: expected 104, got 10.\nTry again.", "  Reverse the word banana:  "]


def _write(directory, specials, bos, eos, pad, jinja, jinja_file=False):
  from tokenizers import Tokenizer as Tok, decoders, models, pre_tokenizers, trainers
  tok = Tok(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  tok.train_from_iterator(SENTENCES, trainers.BpeTrainer(
      vocab_size=400, special_tokens=list(specials),
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
  os.makedirs(directory, exist_ok=True)
  tok.save(os.path.join(directory, "tokenizer.json"))
  config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos,
            "pad_token": pad}
  if jinja_file:
    with open(os.path.join(directory, "chat_template.jinja"), "w") as f:
      f.write(jinja)
  elif jinja is not None:
    config["chat_template"] = jinja
  with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
    json.dump(config, f)
  return directory


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
  name = request.param
  d = _write(str(tmp_path_factory.mktemp(name)), *FAMILIES[name])
  return name, load_tokenizer(d), transformers.AutoTokenizer.from_pretrained(d)


def _reference(ref, messages, generation_prompt):
  out = ref.apply_chat_template(messages, tokenize=True, add_generation_prompt=generation_prompt,
                                return_dict=True)
  return list(out["input_ids"])


@pytest.mark.parametrize("system", [None, "You are terse."])
def test_three_turn_episode_equals_apply_chat_template(family, system):
  """Prompt, three sampled turns (the second cut at max_new_tokens), two
  observations: at every turn the model continues from exactly the ids
  transformers renders, and the finished episode is its conversation."""
  name, tok, ref = family
  fmt = prompt_format(tok, "auto", system or "")
  assert fmt.name == name
  messages = ([] if system is None else [{"role": "system", "content": system}]) + [
      {"role": "user", "content": PROMPT}]
  ids = fmt.prompt_ids(PROMPT)
  assert ids == _reference(ref, messages, True)
  for k, (text, stopped) in enumerate(ANSWERS):
    sampled = tok.encode(text) + ([fmt.end_of_turn] if stopped else [])
    ids += sampled
    messages.append({"role": "assistant", "content": text})
    if k < len(OBSERVATIONS):
      ids += fmt.observation_ids(OBSERVATIONS[k], ids[-1])
      messages.append({"role": "user", "content": OBSERVATIONS[k]})
      assert ids == _reference(ref, messages, True), f"after turn {k + 1}"
  # The episode ends on the last turn's end-of-turn token; the template's
  # conversation adds only what follows that token.
  assert ids + after_stop_ids(tok, TEMPLATES[name]) == _reference(ref, messages, False)


def test_what_the_formats_read_off_their_jinja_templates(family):
  name, tok, _ = family
  fmt, terse = prompt_format(tok), prompt_format(tok, name, "You are terse.")
  dated = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
  assert (fmt.system, terse.system) == {
      "chatml": ("You are a careful tutor.", "You are terse."),
      "llama3": (dated, dated + "You are terse."),
      "gemma": (None, "You are terse.")}[name]
  assert fmt.strip == (name != "chatml")  # Llama 3 and Gemma 3 trim a message's text
  eot = tok.token_id(TEMPLATES[name].stop_token)
  assert fmt.stop_ids == tuple(dict.fromkeys((eot, tok.eos_id)))
  assert eot in fmt.stop_ids and tok.eos_id in fmt.stop_ids
  # The prompt's text sits between the format's prefix and suffix.
  ids = fmt.prompt_ids(PROMPT)
  assert fmt.prompt_text_ids(ids) == tok.encode(PROMPT)
  assert tok.decode(terse.prompt_text_ids(terse.prompt_ids(PROMPT))) == (
      "You are terse.\n\n" + PROMPT if name == "gemma" else PROMPT)


def test_jinja_rendering_matches_transformers(family):
  """render_jinja is transformers' rendering (what read_jinja reads)."""
  _, tok, ref = family
  messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": PROMPT},
              {"role": "assistant", "content": " 104 "}, {"role": "user", "content": "\nAgain."}]
  for gen in (False, True):
    ours = render_jinja(tok.chat_template, messages, gen, tok.token_text(tok.bos_id),
                        tok.token_text(tok.eos_id))
    assert ours == ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)


def test_bare_format_is_bos_plus_text():
  """The byte-level bases: BOS + bytes, observations as bytes, stop at EOS."""
  tok = ByteTokenizer()
  for fmt in (prompt_format(tok), prompt_format(tok, "none"), PromptFormat(tok)):
    assert fmt.name == "bare" and fmt.template is None and fmt.stop_ids == (258,)
    assert fmt.prompt_ids("2*52=") == [257, 50, 42, 53, 50, 61]
    assert fmt.observation_ids("\nFAIL: 7", 258) == list(b"\nFAIL: 7")
    assert fmt.observation_ids("x", 65) == [120]
    assert fmt.prompt_text_ids([257, 50, 42]) == [50, 42]


def test_a_tokenizer_without_template_is_bare_under_auto(tmp_path):
  d = _write(str(tmp_path), *FAMILIES["chatml"][:4], None)
  tok = load_tokenizer(d)
  assert tok.chat_template is None
  fmt = prompt_format(tok)
  assert fmt.name == "bare" and fmt.prompt_ids("Hi") == [tok.bos_id] + tok.encode("Hi")
  # The template named by hand serves it too: no Jinja, so no default system turn.
  named = prompt_format(tok, "chatml")
  assert named.system is None and not named.strip
  assert tok.decode(named.prompt_ids("Hi"), skip_special=False) == (
      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_chat_template_jinja_file_and_named_lists(tmp_path):
  """transformers' chat_template.jinja file wins over tokenizer_config.json;
  a list of named templates gives its "default"."""
  d = _write(str(tmp_path / "file"), *FAMILIES["chatml"][:4], CHATML, jinja_file=True)
  assert load_tokenizer(d).chat_template == CHATML
  d = _write(str(tmp_path / "list"), *FAMILIES["chatml"][:4], None)
  with open(os.path.join(d, "tokenizer_config.json")) as f:
    config = json.load(f)
  config["chat_template"] = [{"name": "tool_use", "template": "x"},
                             {"name": "default", "template": CHATML}]
  with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
    json.dump(config, f)
  assert load_tokenizer(d).chat_template == CHATML


def test_every_value_the_tokenizer_cannot_serve_is_an_error(family, tmp_path):
  name, tok, _ = family
  with pytest.raises(ValueError, match=r"rollout.chat_template is 'chatm'; expected one of"):
    prompt_format(tok, "chatm")
  other = "gemma" if name != "gemma" else "chatml"
  with pytest.raises(ValueError, match=rf"chat_template='{other}'.*special tokens"):
    prompt_format(tok, other)
  with pytest.raises(ValueError, match=r"rollout.chat_template='chatml'.*ByteTokenizer"):
    prompt_format(ByteTokenizer(), "chatml")
  with pytest.raises(ValueError, match=r"rollout.system_prompt is set .*'auto' and the tokenizer "
                                       r"has none"):
    prompt_format(ByteTokenizer(), "auto", "You are terse.")
  with pytest.raises(ValueError, match=r"rollout.system_prompt is set .*'none'"):
    prompt_format(tok, "none", "You are terse.")
  # A Jinja template rlpt has no layout for, and one whose layout is not its family's.
  d = _write(str(tmp_path / "inst"), *FAMILIES[name][:4], "[INST] {{ messages[0]['content'] }}")
  with pytest.raises(ValueError, match=r"chat_template='auto'.*matches none.*'none'"):
    prompt_format(load_tokenizer(d))
  odd = CHATML.replace(r"'<|im_start|>' + message['role'] + '\n'",
                       r"'<|im_start|>' + message['role'] + ':\n'")
  with pytest.raises(ValueError, match=r"renders .*lays the same messages out as"):
    read_jinja(TEMPLATES["chatml"], odd, None)


def test_config_keys():
  assert set(CHAT_TEMPLATES) == set(CHAT_TEMPLATE_CHOICES)
  assert (RolloutConfig().chat_template, RolloutConfig().system_prompt) == ("auto", "")
  with pytest.raises(ConfigError, match=r"rollout.chat_template is 'ChatML'; expected one of"):
    RolloutConfig(chat_template="ChatML")
  with pytest.raises(ConfigError, match=r"rollout.system_prompt is set .*'none'"):
    RolloutConfig(chat_template="none", system_prompt="You are terse.")
