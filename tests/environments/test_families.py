"""Every registered domain in both prompt styles, plus family-specific verifier behaviour."""

import importlib

import gymnasium
import pytest

import environments  # noqa: F401
from environments import registry, splits
from environments.cad import runner as cad_runner
from environments.families import longctx
from environments.verdicts import PROMPT_STYLES, Problem

ALL = [s.id for s in registry.list_domains()]
# What every instruct prompt ends with: the answer format in words (environments.answers).
FORMATS = ("Put your final answer on a last line of the form `Answer: ",
           "End your reply with a line `Answer:` followed by your final answer",
           "fenced block.")


def test_catalogue_size_and_coverage():
    assert len(ALL) >= 200
    fams = registry.families()
    assert {"math", "strings", "code", "terminal", "finance", "cad", "longctx"} <= set(fams)
    for family in fams:
        assert {s.difficulty for s in registry.list_domains(family=family)} == {"easy", "medium", "hard"}, family
    for spec in registry.list_domains():
        assert spec.prompt_styles == PROMPT_STYLES, spec.id  # every built-in domain offers both


def test_the_made_up_language_and_the_csv_documents_are_gone():
    # The CSG mini-language and the generated-CSV documents family: no real model
    # can know a language made up here; the CAD and finance families replace them.
    assert not registry.list_domains(family="documents")
    assert not [d for d in ALL if d.startswith("rlpt/cad-csg-")]
    for name in ("csg", "documents"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"environments.families.{name}")


def _skip_unless_runnable(spec, request):
    if spec.family == "tbench":
        request.getfixturevalue("tbench_images")  # terminal tasks run in their built images
    if "build123d" in spec.tags and not cad_runner.available()[0]:
        pytest.skip(f"{spec.id} needs the cad extra: {cad_runner.available()[1]}")


@pytest.mark.parametrize("domain_id", ALL)
def test_every_domain_demonstration_passes_and_garbage_does_not(domain_id, request):
    spec = registry.get(domain_id)
    _skip_unless_runnable(spec, request)
    offered = getattr(registry.domain(domain_id), "splits", splits.SPLITS)  # eval-only benchmarks offer one
    for style in PROMPT_STYLES:
        env = gymnasium.make(domain_id, prompt_style=style)
        max_prompt, _ = spec.bounds(style)
        for seed, split in ((0, "train"), (1, "eval")):
            if split not in offered:
                with pytest.raises(ValueError, match=split):
                    gymnasium.make(domain_id, prompt_style=style).reset(seed=seed, options={"split": split})
                continue
            obs, info = env.reset(seed=seed, options={"split": split})
            assert info["prompt_style"] == style
            assert len(obs.encode("utf-8")) <= max_prompt  # UTF-8 text (rg questions are not all ASCII)
            if offered == splits.SPLITS:
                assert splits.split_of(env.unwrapped.task.key) == split
            if style == "instruct":
                assert any(f in obs for f in FORMATS), obs[-400:]  # the answer format, in words
            _, reward, terminated, _, step_info = env.step(info["demonstration"])
            assert (reward, terminated, step_info["verdict"]) == (1.0, True, "PASS"), (style, obs, info, step_info)
        env.reset(seed=2, options={"split": offered[-1]})
        garbage = "@@@ ???" if style == "bare" else "I am not sure.\nAnswer: @@@ ???"
        _, reward, _, _, step_info = env.step(garbage)
        assert reward < 1.0 and step_info["verdict"] != "PASS" and not step_info["infra_error"]


@pytest.mark.parametrize("domain_id", [d for d in ALL if registry.get(d).family != "tbench"])
def test_both_styles_show_the_same_task(domain_id):
    """The style is chosen per environment: the same seed and split give the same
    task (its key, so its id and split) and the same grading data in both."""
    offered = getattr(registry.domain(domain_id), "splits", splits.SPLITS)
    bare, instruct = (gymnasium.make(domain_id, prompt_style=s) for s in PROMPT_STYLES)
    for seed in (3, 4):
        a, b = (env.reset(seed=seed, options={"split": offered[0]}) for env in (bare, instruct))
        assert a[1]["task_id"] == b[1]["task_id"]
        assert bare.unwrapped.task.key == instruct.unwrapped.task.key
        assert a[0] != b[0]  # the instruct prompt is the task in words, not the bare prompt
        # The bare form is exactly the task's own prompt and demonstration.
        assert (a[0], a[1]["demonstration"]) == (bare.unwrapped.task.prompt, bare.unwrapped.task.demonstration)


def test_prompt_style_errors_name_the_value_and_the_choices():
    with pytest.raises(ValueError, match=r"unknown prompt_style 'chat'; expected one of \('bare', 'instruct'\)"):
        gymnasium.make("rlpt/math-add-easy-v0", prompt_style="chat")
    with pytest.raises(ValueError, match="unknown prompt_style None"):
        gymnasium.make("rlpt/math-add-easy-v0", prompt_style=None)


def test_a_domain_without_an_instruct_form_says_so():
    class Plain(registry.Domain):
        spec = registry.DomainSpec("rlpt/plainstyle-echo-easy-v0", "plainstyle", "easy", (), 8, 8)

        def sample(self, rng):
            return Problem(key=str(rng.integers(1000)), prompt="say hi", demonstration="hi")

        def grade(self, task, answer):
            raise AssertionError("not graded here")

    registry.register(Plain())
    try:
        with pytest.raises(ValueError, match=r"offers prompt_style \('bare',\), not 'instruct'"):
            gymnasium.make("rlpt/plainstyle-echo-easy-v0", prompt_style="instruct")
        assert gymnasium.make("rlpt/plainstyle-echo-easy-v0").reset(seed=0)[0] == "say hi"
    finally:
        registry.unregister("rlpt/plainstyle-echo-easy-v0")
    with pytest.raises(ValueError, match="both be positive ints"):
        registry.DomainSpec("rlpt/plainstyle-echo-easy-v0", "plainstyle", "easy", (), 8, 8,
                            max_instruct_prompt_chars=64)


def _step(domain_id, answer, seed=0, style="instruct"):
    env = gymnasium.make(domain_id, prompt_style=style)
    _, info = env.reset(seed=seed)
    _, reward, _, _, step_info = env.step(answer(info["demonstration"]) if callable(answer) else answer)
    return reward, step_info["verdict"], step_info["feedback"]


def test_exact_match_instruct_replies():
    env = gymnasium.make("rlpt/math-mul-easy-v0", prompt_style="instruct")
    obs, info = env.reset(seed=0)
    assert obs.startswith("What is ") and obs.endswith("`Answer: <integer>`.")
    value = int(env.unwrapped.task.hidden)
    replies = {  # as SmolLM2 / Qwen write them
        f"Let me multiply step by step.\n\nSo, the answer is {value}.": "PASS",
        f"We compute the product:\n\\[ {obs[8:obs.index('?')]} = {value} \\]\nTherefore, the final answer is "
        f"$\\boxed{{{value}}}$.": "PASS",
        f"**Answer:** {value:,}": "PASS",
        f"Answer: {value + 1}": "FAIL",
        f"Answer: {value}\nAnswer: {value + 1}": "MALFORMED",
        f"Answer: {value} or {value + 1}": "MALFORMED",
        f"The product is {value}.": "MALFORMED",  # no final answer line: the reply is not read for a number
    }
    for reply, verdict in replies.items():
        env.reset(seed=0)
        _, _, _, _, step = env.step(reply)
        assert step["verdict"] == verdict, (reply, step)
    env.reset(seed=0)
    assert "2 different final answers" in env.step(f"Answer: {value}\nAnswer: {value + 1}")[4]["feedback"]
    # The bare answer the tiny base writes still grades as before, in either style.
    env.reset(seed=0)
    assert env.step(str(value))[1] == 1.0
    assert _step("rlpt/strings-reverse-easy-v0", lambda d: "Answer: " + d.split()[-1] + "x")[1] == "FAIL"
    assert _step("rlpt/strings-palindrome-easy-v0", "Answer: yes or no")[1] == "MALFORMED"


def test_instruct_code_terminal_and_retrieval_replies():
    code = "rlpt/code-linear-easy-v0"
    assert _step(code, lambda d: "The pattern is linear.\n\n" + d + "\n\nThis fits all three points.")[1] == "PASS"
    assert _step(code, "```python\ndef f(x):\n    return 12345\n```")[1] == "FAIL"
    assert _step(code, "```python\ndef f(x):\n    if x < 0:\n        return 0\n    return x\n```")[1] == "FAIL"
    terminal = "rlpt/terminal-create-easy-v0"
    assert _step(terminal, lambda d: "Use echo with a redirect:\n\n" + d)[1] == "PASS"
    assert _step(terminal, "```sh\necho wrong > nothing.txt\n```")[1] == "FAIL"
    retrieval = "rlpt/longctx-kv-1k-easy-v0"
    assert _step(retrieval, lambda d: d.replace("Answer: ", "Answer: **") + "**")[1] == "PASS"
    assert _step(retrieval, "Answer: 99999999")[1] == "FAIL"


def test_instruct_finance_tools_reasoning_gym_and_dataset_replies():
    statement = "rlpt/finance-statement-cell-easy-v0"
    assert _step(statement, lambda d: "The table gives it in $ millions.\n" + d.replace("Answer: ", "Answer: $")
                 + " million")[1] == "PASS"
    assert _step(statement, lambda d: d + "\nAnswer: 1")[1] == "MALFORMED"
    extract = "rlpt/finance-report-extract-easy-v0"
    prose = lambda d: f"Reading the cover page and the tables:\n\n{d}\n\nAll from the report."  # noqa: E731
    assert _step(extract, prose)[1] == "PASS"
    tools = gymnasium.make("rlpt/tools-calc-easy-v0", prompt_style="instruct")
    _, info = tools.reset(seed=0)
    call = info["demonstration_turns"][0].split("\n")[1]  # the first tool call's JSON, out of its fence
    obs, reward, terminated, _, step = tools.step(f"I will use the calculator.\n{call}")
    assert (step["verdict"], reward, terminated) == ("TOOL", 0.0, False) and obs.startswith("\nresult: ")
    _, _, _, _, step = tools.step(f'{call}\n{{"answer": "1"}}')
    assert step["verdict"] == "MALFORMED" and "2 different JSON objects" in step["feedback"]
    rg = "rlpt/rg-basic-arithmetic-easy-v0"
    bold = lambda d: "Working it out gives:\n" + d.replace("Answer: ", "Answer: **") + "**"  # noqa: E731
    assert _step(rg, bold)[1] == "PASS"
    assert _step(rg, lambda d: d + "\nAnswer: 123456789")[1] == "MALFORMED"
    arith = "rlpt/dataset-arith-easy-v0"
    assert _step(arith, lambda d: "Step by step.\n" + d)[1] == "PASS"
    assert _step(arith, lambda d: d + " or 123456")[1] == "MALFORMED"


def _grade(domain_id, answer, seed=0):
    env = gymnasium.make(domain_id)
    _, info = env.reset(seed=seed)
    _, reward, _, _, step_info = env.step(answer(info["demonstration"]) if callable(answer) else answer)
    return reward, step_info["verdict"], step_info["feedback"]


def test_terminal_grades_workspace_state():
    assert _grade("rlpt/terminal-delete-hard-v0", "rm -rf *")[:2] == (0.0, "FAIL")
    reward, verdict, feedback = _grade("rlpt/terminal-count-medium-v0", "echo 999 > count.txt")
    assert (reward, verdict) == (0.0, "FAIL") and "count.txt" in feedback
    assert _grade("rlpt/terminal-create-easy-v0", "sleep 30")[:2] == (0.0, "TIMEOUT")
    assert _grade("rlpt/terminal-sort-easy-v0", lambda d: "sort -f " + d[len("sort "):])[0] == 1.0


def test_longctx_lengths_are_configurable():
    specs = longctx.register_length(3000, "medium")
    assert len(specs) == 4 and all(s.max_prompt_chars >= 3000 for s in specs)
    env = gymnasium.make(specs[0].id)
    obs, info = env.reset(seed=0)
    assert 3000 <= len(obs) <= specs[0].max_prompt_chars
    assert env.step(info["demonstration"])[1] == 1.0
    with pytest.raises(ValueError, match="already registered"):
        longctx.register_length(3000, "medium")
