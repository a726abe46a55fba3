"""Chat templates for multi-turn episodes, encoded token-exactly turn by turn.

A conversation's ids are the concatenation of its turns' ids, each turn
encoded on its own; nothing is ever decoded and re-encoded. In a multi-turn
RL episode the policy's sampled ids (up to and including its end-of-turn
token) are appended as they were sampled, then ``after_stop`` ids (ChatML's
and Gemma's newline after the end-of-turn token), then the environment's next
turn encoded with ``encode_turn``. So the ids trained on are exactly the ids
sampled and seen. A turn is header ids + ``encode(content)`` + end-of-turn ids,
the content always one ``encode`` call of its own, as the sampler produces it.

Special tokens are inserted by id (``Tokenizer.token_id``), never parsed out
of text; the text between two special tokens is one ``encode`` call, which is
also how Hugging Face ``tokenizers`` splits a rendered template, so for
tokenizer.json tokenizers whose pre-tokenizer splits after the header's
newline (byte-level BPE with the GPT-2 regex: Llama 3, Qwen) the ids equal
those of the rendered text.

Templates (small and explicit, one per family):

- ``llama3``: <|begin_of_text|> then <|start_header_id|>role<|end_header_id|>\\n\\n
  content<|eot_id|> per turn.
- ``chatml`` (Qwen2/Qwen3): <|im_start|>role\\ncontent<|im_end|>\\n per turn, no BOS.
- ``gemma``: <bos> then <start_of_turn>role\\ncontent<end_of_turn>\\n; the
  assistant role is "model"; a system message is prefixed to the first user turn.

How a rollout's text becomes ids with these templates (or bare, without
one) is rlpt.tokenizers.prompts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple



class Special(str):
  """A special token inside a template, inserted by its id."""


@dataclasses.dataclass(frozen=True)
class ChatTemplate:
  """One family's turn layout.

  start: special tokens opening a conversation.
  open: segments before the role name; header_end: segments between the role
  name and the content; close: segments after the content, the first of
  which is the end-of-turn token the policy emits (its stop token).
  roles: role renames (Gemma's assistant is "model").
  system_in_first_user: the family has no system role.
  """

  name: str
  start: tuple[str, ...]
  open: tuple[str, ...]
  header_end: tuple[str, ...]
  close: tuple[str, ...]
  roles: tuple[tuple[str, str], ...] = ()
  system_in_first_user: bool = False

  @property
  def stop_token(self) -> str:
    return self.close[0]

  @property
  def specials(self) -> tuple[str, ...]:
    """The special tokens the template inserts by id (each one token of the vocabulary)."""
    segments = (*self.start, *self.open, *self.header_end, *self.close)
    return tuple(dict.fromkeys(s for s in segments if isinstance(s, Special)))

  def role(self, role: str) -> str:
    return dict(self.roles).get(role, role)


TEMPLATES = {
    "llama3": ChatTemplate("llama3", (Special("<|begin_of_text|>"),),
                           (Special("<|start_header_id|>"),),
                           (Special("<|end_header_id|>"), "\n\n"), (Special("<|eot_id|>"),)),
    "chatml": ChatTemplate("chatml", (), (Special("<|im_start|>"),), ("\n",),
                           (Special("<|im_end|>"), "\n")),
    "gemma": ChatTemplate("gemma", (Special("<bos>"),), (Special("<start_of_turn>"),), ("\n",),
                          (Special("<end_of_turn>"), "\n"), roles=(("assistant", "model"),),
                          system_in_first_user=True),
}
# Hugging Face family -> template name.
FAMILY_TEMPLATES = {"llama": "llama3", "qwen2": "chatml", "qwen3": "chatml", "gemma2": "gemma",
                    "gemma3": "gemma"}
# Markers of a Jinja chat template -> the template above it lays turns out as.
TEMPLATE_MARKERS = (("<|im_start|>", "chatml"), ("<start_of_turn>", "gemma"),
                    ("<|start_header_id|>", "llama3"))


def template_name(jinja: str | None) -> str | None:
  """The rlpt chat template a Jinja template lays turns out as, or None when
  there is none; an unknown template raises, naming its start."""
  if not jinja:
    return None
  for marker, name in TEMPLATE_MARKERS:
    if marker in jinja:
      return name
  raise ValueError(f"chat template {jinja[:80]!r}... matches none of rlpt's templates "
                   f"(markers {[m for m, _ in TEMPLATE_MARKERS]}).")


def get_template(name: str) -> ChatTemplate:
  if name not in TEMPLATES:
    raise ValueError(f"Unknown chat template '{name}'; known: {sorted(TEMPLATES)}.")
  return TEMPLATES[name]


def encode_segments(tokenizer, segments: Sequence[str]) -> list[int]:
  """Ids of template segments: specials by id, each run of text in one encode call."""
  ids: list[int] = []
  text = ""
  for seg in segments:
    if isinstance(seg, Special):
      if text:
        ids += tokenizer.encode(text)
        text = ""
      ids.append(tokenizer.token_id(seg))
    else:
      text += seg
  if text:
    ids += tokenizer.encode(text)
  return ids


def start_ids(tokenizer, template: ChatTemplate) -> list[int]:
  return encode_segments(tokenizer, template.start)


def encode_turn(tokenizer, template: ChatTemplate, role: str, content: str) -> list[int]:
  """Ids of one whole turn: header, content, end of turn and what follows it.

  The content is its own ``encode`` call, as when the policy samples it after
  ``generation_prompt_ids``: a turn from data and the same turn sampled are the
  same ids (a BPE merge across the header's last newline would break that).
  """
  return (generation_prompt_ids(tokenizer, template, role) + tokenizer.encode(content)
          + encode_segments(tokenizer, template.close))


def generation_prompt_ids(tokenizer, template: ChatTemplate, role: str = "assistant") -> list[int]:
  """Ids of the header the policy continues from (its turn's content comes next)."""
  return encode_segments(tokenizer, (*template.open, template.role(role), *template.header_end))


def stop_id(tokenizer, template: ChatTemplate) -> int:
  """The end-of-turn id: the sampler's stop token for this template."""
  return tokenizer.token_id(template.stop_token)


def after_stop_ids(tokenizer, template: ChatTemplate) -> list[int]:
  """Ids that follow the sampled end-of-turn token to complete the turn."""
  return encode_segments(tokenizer, template.close[1:])


class Conversation(NamedTuple):
  """ids: the whole conversation; turn_spans: (start, end) of each turn's ids
  (the first starts after the start ids); assistant_mask: 1 on assistant
  content and end-of-turn tokens (what the policy emits), else 0."""

  ids: list[int]
  turn_spans: list[tuple[int, int]]
  assistant_mask: list[int]


def encode_conversation(tokenizer, template: ChatTemplate, messages: Sequence[dict],
                        add_generation_prompt: bool = False) -> Conversation:
  """Token-exact ids of ``messages`` ([{"role", "content"}]), turn by turn."""
  messages = [dict(m) for m in messages]
  for i, m in enumerate(messages):
    if m.get("role") not in ("system", "user", "assistant") or not isinstance(m.get("content"), str):
      raise ValueError(f"messages[{i}] must have role system/user/assistant and str content, "
                       f"got {m!r}.")
  if template.system_in_first_user and messages and messages[0]["role"] == "system":
    system = messages.pop(0)["content"]
    if not messages or messages[0]["role"] != "user":
      raise ValueError(f"template '{template.name}' puts the system message into the first "
                       "user turn, but no user turn follows it.")
    messages[0]["content"] = system + "\n\n" + messages[0]["content"]
  ids = start_ids(tokenizer, template)
  mask = [0] * len(ids)
  spans = []
  for m in messages:
    turn = encode_turn(tokenizer, template, m["role"], m["content"])
    spans.append((len(ids), len(ids) + len(turn)))
    if m["role"] == "assistant":
      header = len(generation_prompt_ids(tokenizer, template))
      tail = len(after_stop_ids(tokenizer, template))
      mask += [0] * header + [1] * (len(turn) - header - tail) + [0] * tail
    else:
      mask += [0] * len(turn)
    ids += turn
  if add_generation_prompt:
    gen = generation_prompt_ids(tokenizer, template)
    ids += gen
    mask += [0] * len(gen)
  return Conversation(ids, spans, mask)


def render(template: ChatTemplate, messages: Sequence[dict],
           add_generation_prompt: bool = False) -> str:
  """The conversation as text (for display and tests; training uses the ids)."""
  conv = [dict(m) for m in messages]
  if template.system_in_first_user and conv and conv[0]["role"] == "system":
    system = conv.pop(0)["content"]
    conv[0]["content"] = system + "\n\n" + conv[0]["content"]
  parts = list(template.start)
  for m in conv:
    parts += [*template.open, template.role(m["role"]), *template.header_end, m["content"],
              *template.close]
  if add_generation_prompt:
    parts += [*template.open, template.role("assistant"), *template.header_end]
  return "".join(parts)
