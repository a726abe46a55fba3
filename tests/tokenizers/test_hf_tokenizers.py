"""Real tokenizer loading (tokenizer.json, tokenizer.model) and token-exact chat
templates, on tokenizers trained here from a few sentences (no downloads)."""

import json
import os

import pytest

pytest.importorskip("tokenizers")

from rlpt.models.hf_fixtures import write_byte_tokenizer
from rlpt.tokenizers import ByteTokenizer, Tokenizer
from rlpt.tokenizers.chat import (TEMPLATES, after_stop_ids, encode_conversation, encode_turn,
                                  generation_prompt_ids, render, start_ids, stop_id)
from rlpt.tokenizers.hf import HFTokenizer, SentencePieceTokenizer, load_tokenizer

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "What is 17 plus 25? The answer is 42.",
    "Sort the list: 3, 1, 2. Sorted: 1, 2, 3.",
    "Hello there! How are you today?",
    "Reverse the word banana: ananab.",
] * 4

CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 17 plus 25?"},
    {"role": "assistant", "content": "42."},
    {"role": "user", "content": "Hello there!"},
]

CHATML = ("<|im_start|>", "<|im_end|>")
LLAMA3 = ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
GEMMA = ("<start_of_turn>", "<end_of_turn>")


def _train_bpe(directory, specials, bos, eos, pad):
  from tokenizers import Tokenizer as Tok, decoders, models, pre_tokenizers, trainers
  tok = Tok(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=list(specials),
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(SENTENCES, trainer)
  os.makedirs(directory, exist_ok=True)
  tok.save(os.path.join(directory, "tokenizer.json"))
  with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
    json.dump({"bos_token": bos, "eos_token": eos, "pad_token": pad}, f)
  return tok


@pytest.fixture(scope="module")
def chatml_tok(tmp_path_factory):
  d = str(tmp_path_factory.mktemp("qwen_tok"))
  _train_bpe(d, ("<|endoftext|>",) + CHATML, None, "<|im_end|>", "<|endoftext|>")
  return load_tokenizer(d)


@pytest.fixture(scope="module")
def llama_tok(tmp_path_factory):
  d = str(tmp_path_factory.mktemp("llama_tok"))
  _train_bpe(d, LLAMA3 + ("<|end_of_text|>",), "<|begin_of_text|>", "<|eot_id|>", None)
  return load_tokenizer(d)


@pytest.fixture(scope="module")
def sp_tok(tmp_path_factory):
  spm = pytest.importorskip("sentencepiece")
  d = tmp_path_factory.mktemp("gemma_tok")
  text = d / "corpus.txt"
  text.write_text("\n".join(SENTENCES))
  # Gemma's layout: pad 0, eos 1, bos 2, unk 3; no dummy prefix; turn markers
  # are user-defined symbols; byte fallback so no text is unknown; identity
  # normalization keeps newlines and repeated spaces.
  spm.SentencePieceTrainer.train(
      input=str(text), model_prefix=str(d / "tokenizer"), vocab_size=400, model_type="bpe",
      pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>",
      bos_piece="<bos>", user_defined_symbols=list(GEMMA), add_dummy_prefix=False,
      byte_fallback=True, character_coverage=1.0, normalization_rule_name="identity",
      remove_extra_whitespaces=False, minloglevel=2)
  return load_tokenizer(str(d))


def test_loaders_pick_the_file_and_implement_the_protocol(chatml_tok, llama_tok, sp_tok):
  assert isinstance(chatml_tok, HFTokenizer) and isinstance(sp_tok, SentencePieceTokenizer)
  for tok in (chatml_tok, llama_tok, sp_tok):
    assert isinstance(tok, Tokenizer)
    text = "What is 17 plus 25? Héllo ☃"
    ids = tok.encode(text)
    assert ids and all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text
    assert tok.decode(ids + [tok.eos_id, tok.pad_id]) == text  # specials dropped
    assert isinstance(tok.decode([tok.vocab_size + 5, 10**9]), str)  # never raises
  assert chatml_tok.eos_id == chatml_tok.token_id("<|im_end|>")
  assert chatml_tok.pad_id == chatml_tok.token_id("<|endoftext|>") and not chatml_tok.has_bos
  assert llama_tok.bos_id == llama_tok.token_id("<|begin_of_text|>")
  assert llama_tok.pad_id == llama_tok.eos_id  # no pad: falls back to EOS
  assert (sp_tok.pad_id, sp_tok.eos_id, sp_tok.bos_id) == (0, 1, 2)


@pytest.mark.parametrize("name", ["chatml", "llama3", "gemma"])
def test_three_turn_conversation_is_the_concatenation_of_its_turns(name, chatml_tok, llama_tok,
                                                                   sp_tok):
  tok = {"chatml": chatml_tok, "llama3": llama_tok, "gemma": sp_tok}[name]
  tpl = TEMPLATES[name]
  messages = CONVERSATION[1:]  # user, assistant, user
  conv = encode_conversation(tok, tpl, messages, add_generation_prompt=True)
  turns = [encode_turn(tok, tpl, m["role"], m["content"]) for m in messages]
  expected = start_ids(tok, tpl) + sum(turns, []) + generation_prompt_ids(tok, tpl)
  assert conv.ids == expected
  for (a, b), t in zip(conv.turn_spans, turns):
    assert conv.ids[a:b] == t
  # No separator dropped: every turn's end-of-turn token (and what follows it) is there.
  eot = stop_id(tok, tpl)
  assert conv.ids.count(eot) == 3
  for a, b in conv.turn_spans:
    assert conv.ids[b - 1 - len(after_stop_ids(tok, tpl))] == eot
  assert tok.decode(conv.ids, skip_special=False).count(tpl.stop_token) == 3
  # The assistant mask covers the assistant's content and its end of turn only.
  a, b = conv.turn_spans[1]
  masked = [i for i, m in zip(conv.ids, conv.assistant_mask) if m]
  assert masked == tok.encode("42.") + [eot]
  # Rendered text of the same conversation decodes back from the ids.
  assert tok.decode(conv.ids, skip_special=False).replace("<bos>", "") == render(
      tpl, messages, True).replace("<bos>", "")


def test_tokenizers_ids_equal_encoding_the_rendered_text(chatml_tok, llama_tok):
  # tokenizers splits text at special tokens exactly where the template has them.
  for tok, name in ((chatml_tok, "chatml"), (llama_tok, "llama3")):
    tpl = TEMPLATES[name]
    conv = encode_conversation(tok, tpl, CONVERSATION, add_generation_prompt=True)
    assert conv.ids == tok.encode(render(tpl, CONVERSATION, True))


def test_multi_turn_episode_appends_sampled_ids_unchanged(chatml_tok):
  """The RL layout: prompt ids + sampled ids (stop included) + after-stop + next turn."""
  tok, tpl = chatml_tok, TEMPLATES["chatml"]
  prompt = encode_conversation(tok, tpl, CONVERSATION[:2], add_generation_prompt=True).ids
  sampled = tok.encode("42.") + [stop_id(tok, tpl)]
  episode = prompt + sampled + after_stop_ids(tok, tpl) + encode_turn(tok, tpl, "user",
                                                                       "Hello there!")
  assert episode == encode_conversation(tok, tpl, CONVERSATION).ids


def test_gemma_has_no_system_role(sp_tok):
  tpl = TEMPLATES["gemma"]
  conv = encode_conversation(sp_tok, tpl, CONVERSATION[:2])
  text = sp_tok.decode(conv.ids, skip_special=False)
  assert "system" not in text and "You are terse.\n\nWhat is 17" in text
  assert conv.ids[0] == sp_tok.bos_id


def test_byte_level_tokenizer_json_matches_byte_tokenizer(tmp_path):
  write_byte_tokenizer(str(tmp_path))
  tok, ref = load_tokenizer(str(tmp_path)), ByteTokenizer()
  assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.vocab_size) == (256, 257, 258, 259)
  for text in ["abc 12+3=15", "  leading spaces\nand lines\t", "Héllo ☃ 日本"]:
    assert tok.encode(text) == ref.encode(text)
    assert tok.decode(tok.encode(text) + [258]) == text
  bad = [0xE2, 0x98, 65]  # truncated UTF-8 then 'A'
  assert tok.decode(bad) == ref.decode(bad)
