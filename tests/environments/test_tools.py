"""The "tools" family: the three tools, the JSON turn protocol, and
non-scored tool turns in TaskEnv (turn budget, repairable errors)."""

import json
import time
from fractions import Fraction

import gymnasium
import pytest

import environments  # noqa: F401
from environments import registry, splits
from environments.families import tools
from environments.families.tools import Table, ToolError, calculate, convert, format_number, run_tool

TOOL_IDS = [s.id for s in registry.list_domains(family="tools")]


def _call(tool, **args):
    return json.dumps({"tool": tool, "args": args})


# ------------------------------------------------------------------ tools


@pytest.mark.parametrize(
    "expr, text",
    [
        ("1+2*3", "7"),
        ("(2+3)*4", "20"),
        ("7/2", "3.5"),
        ("6/2", "3"),
        ("7//2", "3"),
        ("-7//2", "-4"),
        ("7%3", "1"),
        ("2**10", "1024"),
        ("2**-2", "0.25"),
        ("2**0.5", "1.41421356237"),
        ("-(3)", "-3"),
        ("+4 - -4", "8"),
        ("0.1+0.2", "0.3"),
        ("1e3+1", "1001"),
        ("99999*99999", "9999800001"),
        ("10**15", "1000000000000000"),
        ("-" * 190 + "1", "1"),
        ("(" * 99 + "1" + ")" * 99, "1"),
    ],
)
def test_calculator_known_values(expr, text):
    assert format_number(calculate(expr)) == text


@pytest.mark.parametrize(
    "expr, needle",
    [
        ("__import__('os').system('true')", "Call"),
        ("(1).real", "Attribute"),
        ("x+1", "Name"),
        ("abs(-1)", "Call"),
        ("'a'*3", "only numbers"),
        ("[1]*3", "List"),
        ("True+1", "only numbers"),
        ("1j*1j", "only numbers"),
        ("1 if 1 else 2", "IfExp"),
        ("1<2", "Compare"),
        ("1&3", "BitAnd"),
        ("lambda: 1", "Lambda"),
        ("9**9**9", "out of range"),
        ("2**2**2**2**2", "out of range"),
        ("10**16", "out of range"),
        ("1**1000000000000", "exponent"),
        ("2**-5000", "exponent"),
        ("2**-1e308", "out of range"),
        ("1e16", "out of range"),
        ("1e308*1e308", "out of range"),
        ("10**15*10", "out of range"),
        ("9" * 100, "out of range"),
        ("1/0", "division by zero"),
        ("1//0.0", "division by zero"),
        ("5%0", "division by zero"),
        ("0**-1", "division by zero"),
        ("(-8)**0.5", "not real"),
        ("1+", "cannot parse"),
        ("1" * 201, "at most 200"),
        ("(" * 150 + "1" + ")" * 150, "at most 200"),
    ],
)
def test_calculator_rejects_everything_but_bounded_arithmetic(expr, needle):
    start = time.perf_counter()
    with pytest.raises(ToolError, match=needle):
        calculate(expr)
    assert time.perf_counter() - start < 0.5  # refused before any huge computation


def test_calculator_rejects_non_string_expr():
    with pytest.raises(ToolError, match="string"):
        calculate(12)


@pytest.mark.parametrize(
    "value, src, dst, want",
    [
        (2.5, "km", "m", Fraction(2500)),
        (1, "mi", "km", Fraction("1.609344")),
        (1, "ft", "in", Fraction(12)),
        (1, "yd", "ft", Fraction(3)),
        (1, "lb", "g", Fraction("453.59237")),
        (16, "oz", "lb", Fraction(1)),
        (3, "t", "kg", Fraction(3000)),
        (1, "d", "s", Fraction(86400)),
        (90, "min", "h", Fraction(3, 2)),
        (100, "C", "F", Fraction(212)),
        (32, "F", "C", Fraction(0)),
        (-40, "C", "F", Fraction(-40)),
        (0, "C", "K", Fraction("273.15")),
        (0, "K", "F", Fraction("-459.67")),
        ("2.5", "KM", "M", Fraction(2500)),  # numeric strings, unit names ignore case
        (0.1, "m", "mm", Fraction(100)),  # a float is read exactly as written
    ],
)
def test_convert_is_exact(value, src, dst, want):
    assert convert(value, src, dst) == want


@pytest.mark.parametrize(
    "value, src, dst, needle",
    [
        (1, "km", "kg", "cannot convert length"),
        (1, "C", "s", "cannot convert temperature"),
        (1, "parsec", "m", "unknown unit"),
        (1, "m", 3, "unknown unit"),
        ("abc", "m", "cm", "must be a number"),
        (True, "m", "cm", "must be a number"),
        ([1], "m", "cm", "must be a number"),
        ("1e999999999", "m", "cm", "must be a number"),  # never builds 10**999999999
        (1e16, "m", "cm", "out of range"),
        (1e12, "km", "mm", "out of range"),
    ],
)
def test_convert_rejects_bad_args(value, src, dst, needle):
    start = time.perf_counter()
    with pytest.raises(ToolError, match=needle):
        convert(value, src, dst)
    assert time.perf_counter() - start < 0.5


def test_lookup_and_run_tool():
    table = Table("price in $ per item", (("apple", "1.25"), ("pear", "0.80")))
    assert run_tool(table, "lookup", {"key": "Apple "}) == "1.25"
    assert run_tool(table, "calculator", {"expr": "3*1.25+2*0.80"}) == "5.35"
    assert run_tool(table, "convert", {"value": 3, "from": "km", "to": "m"}) == "3000"
    with pytest.raises(ToolError, match="unknown key 'plum'; keys: apple, pear"):
        run_tool(table, "lookup", {"key": "plum"})
    with pytest.raises(ToolError, match="no table"):
        run_tool(Table("none", ()), "lookup", {"key": "apple"})
    with pytest.raises(ToolError, match="unknown tool 'search'"):
        run_tool(table, "search", {"q": "x"})
    with pytest.raises(ToolError, match="arguments must be exactly 'expr'"):
        run_tool(table, "calculator", {"expression": "1"})
    with pytest.raises(ToolError, match="arguments must be exactly 'value', 'from', 'to'"):
        run_tool(table, "convert", {"value": 1, "from": "m"})


# -------------------------------------------------------------- episodes


def test_registry_lists_the_family():
    specs = registry.list_domains(family="tools")
    assert len(specs) >= 9 and "tools" in registry.families()
    assert {s.difficulty for s in specs} == set(registry.DIFFICULTIES)
    assert all(s.max_turns and "multi-turn" in s.tags for s in specs)
    assert all(s.max_turns is None for s in registry.list_domains(family="math"))


@pytest.mark.parametrize("domain_id", TOOL_IDS)
def test_demonstration_transcript_earns_reward_one(domain_id):
    env = gymnasium.make(domain_id)
    spec = registry.get(domain_id)
    for seed, split in ((0, "train"), (1, "eval"), (2, "train"), (3, "train")):
        prompt, info = env.reset(seed=seed, options={"split": split})
        assert prompt.isascii() and len(prompt) <= spec.max_prompt_chars
        assert '{"answer": ' in prompt and '"tool": "calculator"' in prompt  # the protocol is in the prompt
        turns = info["demonstration_turns"]
        assert turns[-1] == info["demonstration"] and set(json.loads(turns[-1])) == {"answer"}
        assert len(turns) <= spec.max_turns - 2  # slack for a repair or two
        for n, turn in enumerate(turns[:-1], start=1):
            assert len(turn) <= spec.max_answer_chars
            obs, reward, terminated, truncated, step_info = env.step(turn)
            assert (reward, terminated, truncated) == (0.0, False, False), (turn, obs)
            assert obs.startswith("\nresult: ") and obs.endswith("\n") and obs.count("\n") == 2
            assert env.observation_space.contains(obs)
            assert step_info["verdict"] == "TOOL" and step_info["tool"] == json.loads(turn)["tool"]
            assert (step_info["turns"], step_info["tool_calls"], step_info["attempt"]) == (n, n, 0)
        obs, reward, terminated, truncated, step_info = env.step(turns[-1])
        assert (reward, terminated, truncated, step_info["verdict"]) == (1.0, True, False, "PASS")
        assert (step_info["turns"], step_info["tool_calls"], step_info["tool_errors"]) == (len(turns), len(turns) - 1, 0)


@pytest.mark.parametrize("domain_id", TOOL_IDS)
def test_wrong_final_answer_earns_zero(domain_id):
    env = gymnasium.make(domain_id)
    _, info = env.reset(seed=5)
    want = json.loads(info["demonstration"])["answer"]
    wrong = "Nowhere" if domain_id.startswith("rlpt/tools-census-easy") else str(float(want) + 1)
    _, reward, terminated, truncated, step_info = env.step(json.dumps({"answer": wrong}))
    assert (reward, terminated, truncated, step_info["verdict"]) == (0.0, True, False, "FAIL")
    assert want not in step_info["feedback"]


def test_numeric_answers_tolerate_rounding_and_formats():
    env = gymnasium.make("rlpt/tools-shop-hard-v0")

    def reward(answer):
        env.reset(seed=0)
        return env.step(json.dumps({"answer": answer}))[1]

    env.reset(seed=0)
    exact = env.unwrapped.task.hidden.answer.exact
    assert reward(f"{float(exact):.2f}") == 1.0
    assert reward(float(exact)) == 1.0  # a JSON number
    assert reward(f"${float(exact):,.4f}") == 1.0
    assert reward(f"{float(exact) + 0.004:.3f}") == 1.0  # within half a cent
    assert reward(f"{float(exact) + 0.02:.2f}") == 0.0
    env.reset(seed=0)
    _, r, terminated, _, step_info = env.step('{"answer": "about five"}')
    assert (r, terminated, step_info["verdict"]) == (0.0, True, "MALFORMED")  # an answer was given: graded
    census = gymnasium.make("rlpt/tools-census-easy-v0")
    _, info = census.reset(seed=0)
    name = json.loads(info["demonstration"])["answer"]
    assert census.step(json.dumps({"answer": name.upper()}))[1] == 1.0


def test_bad_turns_get_feedback_and_the_episode_continues():
    env = gymnasium.make("rlpt/tools-shop-easy-v0", max_turns=20)
    _, info = env.reset(seed=1)
    bad = [
        ("not json at all", "MALFORMED", "not valid JSON"),
        ("[1, 2]", "MALFORMED", "one JSON object"),
        ('{"tool": "calculator", "args": {"expr": NaN}}', "MALFORMED", "not valid JSON"),
        ('{"tool": "calculator", "args": "1+1"}', "MALFORMED", '"args" must be a JSON object'),
        ('{"tool": 3, "args": {}}', "MALFORMED", '"tool" must be a string'),
        ('{"answer": "1", "tool": "lookup"}', "MALFORMED", "exactly"),
        ("[" * 120 + "]" * 120, "MALFORMED", "one JSON object"),
        (_call("search", q="price"), "ERROR", "unknown tool 'search'"),
        (_call("calculator", x="1"), "ERROR", "arguments must be exactly"),
        (_call("calculator", expr="__import__('os')"), "ERROR", "not allowed"),
        (_call("calculator", expr="9**9**9"), "ERROR", "out of range"),
        (_call("lookup", key="unobtainium"), "ERROR", "unknown key"),
        (_call("convert", value=1, **{"from": "km", "to": "kg"}), "ERROR", "cannot convert"),
        ("", "MALFORMED", "empty"),  # rejected by the env itself, still repairable
        ("x" * 100_000, "MALFORMED", "at most 256"),
        (b"\xff{", "MALFORMED", "UTF-8"),
    ]
    for n, (action, verdict, needle) in enumerate(bad, start=1):
        obs, reward, terminated, truncated, step_info = env.step(action)
        assert (reward, terminated, truncated) == (0.0, False, False), action
        assert step_info["verdict"] == verdict and needle in step_info["feedback"], (action, step_info)
        assert obs == f"\n{verdict}: {step_info['feedback']}\n" and env.observation_space.contains(obs)
        assert (step_info["turns"], step_info["tool_errors"], step_info["tool_calls"]) == (n, n, 0)
    # After all that, the model can still solve the task.
    for turn in info["demonstration_turns"]:
        _, reward, terminated, _, step_info = env.step(turn)
    assert (reward, terminated, step_info["tool_errors"]) == (1.0, True, len(bad))


def test_turn_budget_truncates():
    env = gymnasium.make("rlpt/tools-calc-easy-v0", max_turns=3)
    env.reset(seed=0)
    for _ in range(2):
        assert env.step(_call("calculator", expr="1+1"))[1:4] == (0.0, False, False)
    obs, reward, terminated, truncated, step_info = env.step(_call("calculator", expr="1+1"))
    assert (obs, reward, terminated, truncated, step_info["turns"]) == ("\nresult: 2\n", 0.0, False, True, 3)
    with pytest.raises(RuntimeError, match="reset"):
        env.step('{"answer": "2"}')
    # The spec's default budget applies without max_turns.
    env = gymnasium.make("rlpt/tools-calc-easy-v0")
    env.reset(seed=0)
    results = [env.step("oops")[3] for _ in range(registry.get("rlpt/tools-calc-easy-v0").max_turns)]
    assert results == [False] * (len(results) - 1) + [True]


def test_attempts_and_turns_together():
    env = gymnasium.make("rlpt/tools-census-medium-v0", max_attempts=2, max_turns=8)
    prompt, info = env.reset(seed=2)
    obs, reward, terminated, truncated, step_info = env.step('{"answer": "-1"}')
    assert (reward, terminated, truncated, step_info["attempt"]) == (0.0, False, False, 1)
    assert obs == "\nFAIL: wrong answer\n"
    for turn in info["demonstration_turns"]:
        _, reward, terminated, truncated, step_info = env.step(turn)
    assert (reward, terminated, step_info["attempt"], step_info["turns"]) == (1.0, True, 2, 1 + len(info["demonstration_turns"]))
    # A failed answer on the last turn truncates even with attempts left.
    env = gymnasium.make("rlpt/tools-census-medium-v0", max_attempts=5, max_turns=2)
    env.reset(seed=2)
    env.step(_call("lookup", key="nobody"))
    assert env.step('{"answer": "-1"}')[1:4] == (0.0, False, True)


def test_max_turns_is_validated_and_other_domains_are_unchanged():
    with pytest.raises(ValueError, match="tool-using"):
        gymnasium.make("rlpt/math-add-easy-v0", max_turns=3)
    with pytest.raises(ValueError, match="max_turns"):
        gymnasium.make("rlpt/tools-calc-easy-v0", max_turns=0)
    env = gymnasium.make("rlpt/math-add-easy-v0")
    _, info = env.reset(seed=0)
    assert "demonstration_turns" not in info
    assert "turns" not in env.step(info["demonstration"])[4]


@pytest.mark.parametrize("domain_id", ["rlpt/tools-census-easy-v0", "rlpt/tools-convert-medium-v0", "rlpt/tools-recipe-hard-v0"])
def test_reset_is_deterministic_and_splits_are_disjoint(domain_id):
    a, b = gymnasium.make(domain_id), gymnasium.make(domain_id)
    seen = {}
    for split in splits.SPLITS:
        keys, prompts = set(), set()
        for seed in range(300):
            obs, info = a.reset(seed=seed, options={"split": split})
            assert (obs, info) == b.reset(seed=seed, options={"split": split})
            assert splits.split_of(a.unwrapped.task.key) == split
            keys.add(a.unwrapped.task.key)
            prompts.add(obs)
        seen[split] = (keys, prompts)
    assert not seen["train"][0] & seen["eval"][0]
    assert not seen["train"][1] & seen["eval"][1]
    assert len(seen["eval"][1]) > 200 and len(seen["train"][1]) > 200


@pytest.mark.parametrize("domain_id", TOOL_IDS)
def test_gymnasium_make_and_env_checker(domain_id):
    from gymnasium.utils.env_checker import check_env

    env = gymnasium.make(domain_id)
    assert env.unwrapped.max_turns == registry.get(domain_id).max_turns
    check_env(env.unwrapped, skip_render_check=True)
    assert tools.MAX_TURNS[registry.get(domain_id).difficulty] == env.unwrapped.max_turns


def test_a_tool_is_added_by_registering_it():
    double = tools.Tool("double", ("x",), lambda table, a: format_number(2 * a["x"]))
    try:
        tools.register_tool(double)
        assert "double" in tools.tool_names()
        assert run_tool(Table("none", ()), "double", {"x": 21}) == "42"
        with pytest.raises(ToolError, match="arguments must be exactly 'x'"):
            run_tool(Table("none", ()), "double", {"y": 1})
        with pytest.raises(ValueError, match="already registered"):
            tools.register_tool(double)
    finally:
        tools._TOOLS.pop("double", None)
