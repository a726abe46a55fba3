"""How a rollout's text becomes ids: `PromptFormat`, and the checkpoint's own
Jinja template read to build it.

`PromptFormat` is how a rollout's text becomes ids, the one place that does
it: a first prompt, the ids between a sampled turn and the model's next
(the environment's observation), and the tokens the sampler stops on. Bare
(BOS + text, observations appended as text, stop at EOS: the built-in
byte-level bases and models without a template) or a template's turns.
`prompt_format` picks it from ``rollout.chat_template`` /
``rollout.system_prompt`` and the tokenizer's own Jinja template
(``Tokenizer.chat_template``), which `template_name` maps to one of the
templates above.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from typing import NamedTuple

try:
  import jinja2
  from jinja2.ext import Extension, loopcontrols
  from jinja2.sandbox import ImmutableSandboxedEnvironment

  class _Generation(Extension):
    """``{% generation %}...{% endgeneration %}`` (transformers' marks of the
    assistant's tokens in training templates) renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
      next(parser.stream)
      return parser.parse_statements(("name:endgeneration",), drop_needle=True)
except ImportError:  # the one-line error comes from render_jinja, when a template is read
  jinja2 = None

from rlpt.tokenizers.chat import (TEMPLATES, ChatTemplate, after_stop_ids, encode_segments, encode_turn,
                                  generation_prompt_ids, render, start_ids, stop_id, template_name)


# ----------------------------------------------------------------------------
# The checkpoint's own Jinja template.


def render_jinja(jinja: str, messages: Sequence[dict], add_generation_prompt: bool = False,
                 bos_token: str = "", eos_token: str = "") -> str:
  """The text a checkpoint's Jinja chat template renders for ``messages``, in
  the environment transformers' ``apply_chat_template`` renders it in
  (sandboxed, trim_blocks and lstrip_blocks, loop controls, generation marks;
  ``raise_exception``, ``strftime_now`` and a JSON ``tojson``)."""
  if jinja2 is None:
    raise ImportError("reading a checkpoint's chat template needs jinja2 (pip install jinja2; "
                      "requirements.txt brings it with transformers).")

  def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

  def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)

  env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                      extensions=[loopcontrols, _Generation])
  env.filters["tojson"] = tojson
  env.globals.update(raise_exception=raise_exception,
                     strftime_now=lambda fmt: datetime.datetime.now().strftime(fmt))
  return env.from_string(jinja).render(messages=[dict(m) for m in messages],
                                       add_generation_prompt=add_generation_prompt,
                                       bos_token=bos_token, eos_token=eos_token)


class JinjaLayout(NamedTuple):
  """What a checkpoint's Jinja template does beyond its turns' layout.

  system: the system turn's text it renders for the run's system message (its
  own default when the run sets none: SmolLM2-Instruct's "You are a helpful
  AI assistant named SmolLM, trained by Hugging Face"; Llama 3.1's dated
  header before the run's text), or None when it renders no system turn.
  strip: it trims the whitespace around a message's text (Llama 3, Gemma 3).
  """

  system: str | None
  strip: bool


# A user message with whitespace around it shows whether the template trims it.
_PROBE = "\n PROBE \n"


def read_jinja(template: ChatTemplate, jinja: str, system: str | None = None,
               bos_token: str = "", eos_token: str = "") -> JinjaLayout:
  """The `JinjaLayout` of a checkpoint's Jinja template, read off its rendering
  of [system message ``system`` (None: none), a user turn] and the generation
  prompt as ``template`` lays turns out, the user text trimmed or not.

  A rendering that is not that layout raises, showing both: the checkpoint's
  template is not ``template``, so rlpt's ids would not be the ones the model
  was tuned on.
  """
  given = [] if system is None else [{"role": "system", "content": system}]
  text = render_jinja(jinja, [*given, {"role": "user", "content": _PROBE}], True, bos_token,
                      eos_token)
  for strip in (False, True):
    user = [{"role": "user", "content": _PROBE.strip() if strip else _PROBE}]
    if system is None and text == render(template, user, True):
      return JinjaLayout(None, strip)
    head, tail = render(template, [{"role": "system", "content": "\x00"}, *user], True).split("\x00")
    if text.startswith(head) and text.endswith(tail) and len(text) >= len(head) + len(tail):
      found = text[len(head):len(text) - len(tail)]
      if render(template, [{"role": "system", "content": found}, *user], True) == text:
        return JinjaLayout(found, strip)
  ours = render(template, [*given, {"role": "user", "content": _PROBE}], True)
  raise ValueError(f"the tokenizer's Jinja chat template renders {text!r}, but rlpt's "
                   f"'{template.name}' template lays the same messages out as {ours!r}: its ids "
                   "would not be the model's. Choose rollout.chat_template='none' (bare "
                   "prompts) or add the template to rlpt.tokenizers.chat.TEMPLATES.")


# ----------------------------------------------------------------------------
# How a rollout's text becomes ids.

# rollout.chat_template's choices (rlpt.config.rl_sections.CHAT_TEMPLATES repeats them).
CHAT_TEMPLATE_CHOICES = ("auto", "none", *TEMPLATES)


class PromptFormat:
  """How a rollout's text becomes ids: first prompts, what follows a sampled
  turn, and the tokens the sampler stops on. Built by `prompt_format`.

  Bare (``template`` None): a prompt is BOS + ``encode(text)``, an observation
  ``encode(text)`` appended right after the sampled ids, and the sampler stops
  at EOS: the ids rlpt always gave, so the byte-level bases' runs and figures
  are unchanged. Models without a chat template (Gemma 3 base) get these too:
  the domain's prompt states the format.

  With a template: a prompt is the template's start, the system turn if any
  (``system``; Gemma's goes into the user turn, as its template puts it), a
  user turn holding the text and the assistant's header. The sampler stops at
  the template's end-of-turn token (and EOS). After a sampled turn come the
  rest of its end-of-turn segment when it ended on the end-of-turn token
  (ChatML's and Gemma's newline), or the whole close when it did not (cut at
  ``max_new_tokens``, or an EOS that is not the end-of-turn token), then a
  user turn holding the observation and the assistant's header again. The
  sampled ids are never changed: the ids trained on are the ids sampled.

  ``strip``: user texts (prompts, observations) lose the whitespace around
  them, as templates that trim a message's text do (`read_jinja`).
  ``prefix`` and ``suffix``: the ids around the text of every first prompt
  (``prompt_ids(text) == prefix + encode(text) + suffix``, the system text of
  Gemma's template inside the encoded part).
  """

  def __init__(self, tokenizer, template: ChatTemplate | None = None, system: str | None = None,
               strip: bool = False):
    self.tokenizer, self.template, self.system, self.strip = tokenizer, template, system, strip
    self._system_text = ""
    if template is None:
      if system is not None:
        raise ValueError(f"bare prompts have no system turn (got system {system!r}); a system "
                         "prompt needs a chat template.")
      self.end_of_turn = None
      self.stop_ids = (int(tokenizer.eos_id),)
      self.prefix, self.suffix = (int(tokenizer.bos_id),), ()
      return
    check_specials(tokenizer, template)
    self.end_of_turn = stop_id(tokenizer, template)
    self.stop_ids = tuple(dict.fromkeys((self.end_of_turn, int(tokenizer.eos_id))))
    self._close = tuple(encode_segments(tokenizer, template.close))
    self._after_stop = tuple(after_stop_ids(tokenizer, template))
    self._user = tuple(generation_prompt_ids(tokenizer, template, "user"))
    head = start_ids(tokenizer, template)
    if system is not None:
      if template.system_in_first_user:
        self._system_text = system + "\n\n"
      else:
        head += encode_turn(tokenizer, template, "system", system)
    self.prefix = (*head, *self._user)
    self.suffix = (*self._close, *generation_prompt_ids(tokenizer, template))

  @property
  def name(self) -> str:
    """"bare" or the chat template's name."""
    return "bare" if self.template is None else self.template.name

  def prompt_ids(self, text: str) -> list[int]:
    """The ids of a first prompt whose text is ``text``; the model's turn comes next."""
    return [*self.prefix, *self.tokenizer.encode(self._system_text + self._text(text)),
            *self.suffix]

  def _text(self, text: str) -> str:
    return text.strip() if self.strip else text

  def observation_ids(self, text: str, last: int) -> list[int]:
    """The ids that follow a sampled turn, up to the model's next: the
    environment's observation ``text`` as the template has it. ``last``: the
    conversation's last id so far (the turn's last sampled token, or the
    header when it sampled none): whether the turn ended on the end-of-turn token."""
    if self.template is None:
      return self.tokenizer.encode(text)
    close = self._after_stop if int(last) == self.end_of_turn else self._close
    return [*close, *self._user, *self.tokenizer.encode(self._text(text)), *self.suffix]

  def prompt_text_ids(self, ids: Sequence[int]) -> list[int]:
    """The ids of the text inside a first prompt's ids (``prompt_ids``'s
    ``encode`` part: with Gemma's template, the system text it carries too)."""
    return [int(x) for x in ids[len(self.prefix):len(ids) - len(self.suffix)]]


def check_specials(tokenizer, template: ChatTemplate) -> None:
  """Raises naming the special tokens of ``template`` that ``tokenizer`` lacks."""
  lookup = getattr(tokenizer, "token_id", None)  # the byte-level tokenizer has no special tokens

  def has(token: str) -> bool:
    try:
      lookup(token)
    except KeyError:
      return False
    return True
  missing = [s for s in template.specials if lookup is None or not has(s)]
  if missing:
    raise ValueError(f"chat template '{template.name}' inserts the special tokens {missing}, "
                     f"which this tokenizer ({type(tokenizer).__name__}) does not have.")


def prompt_format(tokenizer, chat_template: str = "auto", system_prompt: str = "") -> PromptFormat:
  """The run's `PromptFormat` from ``rollout.chat_template`` and ``rollout.system_prompt``.

  chat_template: "auto", the tokenizer's own template (its Jinja
  ``chat_template``, mapped by `template_name`), or bare when it has none (the
  byte-level bases, base models such as Gemma 3 270M); "none", bare; or a
  name of `TEMPLATES`, which the tokenizer must have the special tokens of.

  system_prompt: the system message. "" sets none of the run's own: the
  conversation is then what the checkpoint's Jinja template makes of one
  without a system message, as transformers' ``apply_chat_template`` does.
  SmolLM2-Instruct's template puts its default system turn first ("You are a
  helpful AI assistant named SmolLM, trained by Hugging Face"), which the
  model was tuned with, so rlpt does too; most templates put none. When the
  tokenizer has a Jinja template, the system turn, whether texts are trimmed
  and the layout of a user turn are read off its rendering (`read_jinja`),
  so the ids are those of ``apply_chat_template`` on the same messages. Every
  value the tokenizer cannot serve raises, naming the key and value.
  """
  if chat_template not in CHAT_TEMPLATE_CHOICES:
    raise ValueError(f"rollout.chat_template is {chat_template!r}; expected one of "
                     f"{list(CHAT_TEMPLATE_CHOICES)} ('auto': the tokenizer's own, if any).")
  jinja = tokenizer.chat_template
  name = None
  if chat_template == "auto":
    try:
      name = template_name(jinja)
    except ValueError as e:
      raise ValueError(f"rollout.chat_template='auto': the tokenizer's {e} Set "
                       f"rollout.chat_template to 'none' or one of {sorted(TEMPLATES)}.") from None
  elif chat_template != "none":
    name = chat_template
  if name is None:
    if system_prompt:
      why = "is 'none'" if chat_template == "none" else "is 'auto' and the tokenizer has none"
      raise ValueError(f"rollout.system_prompt is set ({system_prompt[:40]!r}) but prompts are "
                       f"bare (rollout.chat_template {why}): a system prompt needs a chat "
                       f"template, one of {sorted(TEMPLATES)}.")
    return PromptFormat(tokenizer)
  template = TEMPLATES[name]
  try:
    check_specials(tokenizer, template)
    if not jinja:
      return PromptFormat(tokenizer, template, system_prompt or None)
    layout = read_jinja(template, jinja, system_prompt or None,
                        tokenizer.token_text(tokenizer.bos_id), tokenizer.token_text(tokenizer.eos_id))
    return PromptFormat(tokenizer, template, layout.system, layout.strip)
  except ValueError as e:
    raise ValueError(f"rollout.chat_template={chat_template!r}: {e}") from None

