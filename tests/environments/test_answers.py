"""environments.answers: the final answer of replies written as instruct models
write them (SmolLM2-Instruct, Qwen, Gemma: every reply here was written for
this file), of bare answers as the tiny base writes them, and of replies that
give several answers."""

import pytest

from environments import answers
from environments.datasets import verifiers

# Replies in the styles instruct models answer in, each with the value they give.
SMOL_SO = ("To find the product of 7 and 38, we multiply them:\n\n7 * 38 = 266\n\n"
           "So, the answer is 266.")
SMOL_ANSWER_LINE = ("Let's break it down step by step.\n\n1. 7 * 30 = 210\n2. 7 * 8 = 56\n3. 210 + 56 = 266\n\n"
                    "Answer: 266")
QWEN_BOXED = ("To solve \\(7 \\times 38\\), split 38 into 30 + 8:\n"
              "\\[\n7 \\times 30 = 210, \\quad 7 \\times 8 = 56\n\\]\n"
              "Adding these gives \\(210 + 56 = 266\\).\n\nTherefore, the final answer is $\\boxed{266}$.")
QWEN_BOX_ONLY = "We have 7 x 38 = 210 + 56.\n\n\\[\n\\boxed{266}\n\\]"
GSM8K = "7 * 38 = <<7*38=266>>266\n#### 266"
MARKDOWN = "**Step 1:** 7 * 38 = 266.\n\n**Answer:** 266"
MINERVA = "7 * 38 = 266.\nFinal Answer: The final answer is $266$. I hope it is correct."
LAST_NUMBER = "Multiplying 7 by 38 gives\n266"


@pytest.mark.parametrize("reply,source", [
    (SMOL_SO, "statement"), (SMOL_ANSWER_LINE, "statement"), (QWEN_BOXED, "statement"), (QWEN_BOX_ONLY, "boxed"),
    (GSM8K, "statement"), (MARKDOWN, "statement"), (MINERVA, "statement"), (LAST_NUMBER, "statement"),
])
def test_instruct_replies_give_their_final_value(reply, source):
    found = answers.final_answer(reply)
    assert (found.source, found.value) == (source, "266"), found
    assert answers.one_value(found, int) is None


@pytest.mark.parametrize("reply,value", [
    ('The word "fxqw" backwards is "wqxf".\nAnswer: wqxf', "wqxf"),
    ('Reversing each letter:\n\nAnswer: "wqxf"', "wqxf"),
    ("Answer: `wqxf`.", "wqxf"),
    ("The reversed word is $\\boxed{\\text{wqxf}}$.", "wqxf"),
    ("Is it a palindrome? No, it reads differently backwards.\nAnswer: no", "no"),
    ("Answer:\n-2", "-2"),
    ("f(0) = -7 and each step adds -3.\nThe answer is: -2", "-2"),
])
def test_words_and_tokens_are_read_plain(reply, value):
    assert answers.final_answer(reply).value == value


@pytest.mark.parametrize("bare", ["85", "-2", "wqxf", "key-4821", "yes", "3/4"])
def test_a_bare_answer_is_its_own_final_answer(bare):
    found = answers.final_answer(bare)
    assert (found.source, found.value, answers.one_value(found)) == ("text", bare, None)


def test_several_different_answers_are_found_and_one_repeated_is_not():
    two_lines = answers.final_answer("First try:\nAnswer: 3\nWait, let me recheck.\nAnswer: 4")
    assert answers.several(two_lines, int) == ("3", "4")
    assert "2 different final answers ('3', '4')" in answers.one_value(two_lines, int)
    boxes = answers.final_answer("It is either $\\boxed{3}$ or $\\boxed{4}$.")
    assert boxes.source == "boxed" and answers.several(boxes) == ("3", "4")
    choice = answers.final_answer("Answer: 3 or 4")
    assert answers.several(choice) == () and answers.alternatives(choice.value) == ("3", "4")
    assert "candidate answers ('3', '4')" in answers.one_value(choice)
    assert answers.alternatives("either yes or no") == ("yes", "no")
    # The same answer twice, or written two ways that read as one value, is one answer.
    assert answers.several(answers.final_answer("Answer: 266\n\nAnswer: 266.")) == ()
    assert answers.several(answers.final_answer("**Answer:** 1,234\nAnswer: 1234"),
                           lambda c: int(c.replace(",", ""))) == ()
    # An intermediate box before the final statement is no second answer.
    assert answers.one_value(answers.final_answer("So far \\boxed{88}.\nThe answer is 3.")) is None


def test_fenced_blocks():
    reply = ("Here is the function:\n\n```python\ndef f(x):\n    return 2*x + 3\n```\n\n"
             "It doubles x and adds 3.")
    found = answers.final_block(reply)
    assert (found.source, found.lang, found.text) == ("fence", "python", "def f(x):\n    return 2*x + 3")
    # A fence the reply never closes (the token budget ran out) runs to its end.
    assert answers.final_block("```sh\nmv a.txt b.txt").text == "mv a.txt b.txt"
    # A closing fence glued to the last line.
    assert answers.final_block("```sh\nmv a.txt b.txt```").text == "mv a.txt b.txt"
    # No fence: the whole reply (a bare answer).
    assert answers.final_block("  2*x+3 ").text == "2*x+3"
    # Two different blocks are two candidates; the same block twice is one.
    two = answers.final_block("```python\ndef f(x): return x\n```\nUsage:\n```python\nprint(f(2))\n```")
    assert answers.several(two) == ("def f(x): return x", "print(f(2))")
    assert answers.several(answers.final_block("```sh\nls\n```\nor again:\n```sh\nls\n```")) == ()
    # A four-backtick fence holds a three-backtick one.
    assert answers.final_block("````md\n```sh\nls\n```\n````").text == "```sh\nls\n```"


def test_json_answers():
    assert answers.final_json('```json\n{"answer": "5.35"}\n```').text == '{"answer": "5.35"}'
    assert answers.final_json('{"tool": "lookup", "args": {"key": "apple"}}').source == "text"
    prose = answers.final_json('I will look up the price first.\n'
                               '{"tool": "lookup", "args": {"key": "apple"}}\nThen add.')
    assert (prose.source, prose.text) == ("json", '{"tool": "lookup", "args": {"key": "apple"}}')
    two = answers.final_json('First {"tool": "lookup", "args": {"key": "a"}} then {"answer": "3"}')
    assert len(answers.several(two)) == 2
    assert answers.final_json("no JSON here").source == "text"


def test_instructions_and_demonstrations_round_trip():
    line = answers.AnswerLine("<integer>")
    assert line.instruction() == "Put your final answer on a last line of the form `Answer: <integer>`."
    assert answers.final_answer(line.demonstrate("266", "7 * 38 = 266.")).value == "266"
    grid = "1 2\n3 4"
    assert "`Answer:`" in line.instruction(multiline=True)
    assert answers.final_answer(line.demonstrate(grid), multiline=True).value == grid
    fence = answers.Fenced("sh", "one shell command")
    assert fence.instruction() == "Reply with one shell command in one ```sh fenced block."
    assert answers.final_block(fence.demonstrate("mv a.txt b.txt")).text == "mv a.txt b.txt"


def test_number_line_and_multiline_options():
    items = "Cost of sales\n2019"
    assert answers.final_answer(items).value == "2019"  # a last line that is a number alone
    assert answers.final_answer(items, number_line=False).source == "text"
    grid = "1 > 2\n    \n2   1"  # a grid whose spacer line is blank (futoshiki's)
    assert answers.final_answer(f"Answer:\n{grid}", multiline=True).text == grid
    two = answers.final_answer(f"Answer:\n1 2\n\nAnswer:\n{grid}", multiline=True)
    assert two.text == grid and answers.several(two) == ("1 2", grid)
    assert answers.final_answer("Answer:\n1 2\n3 4").text == "1 2"


def test_one_implementation_for_every_grader():
    # The dataset verifiers read answers with this module, under their old names.
    assert verifiers.final_answer is answers.final_answer
    assert verifiers.last_boxed is answers.last_boxed
    assert verifiers.answer_candidates(QWEN_BOXED)[0] == "266"
    assert answers.last_boxed("\\boxed{\\frac{1}{2}} and \\fbox{x^{2}}") == "x^{2}"
