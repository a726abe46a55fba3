"""The TaskEnv episode contract, over every exact-match domain."""

import gymnasium
import pytest

import environments  # noqa: F401
from environments import registry, splits, terminal_tasks

EXACT_DOMAINS = [s.id for s in registry.list_domains() if "exact-match" in s.tags]
SHORT_DOMAINS = [s.id for s in registry.list_domains(tag="short")]


def _make(domain_id, **kwargs):
    return gymnasium.make(domain_id, **kwargs)


@pytest.mark.parametrize("domain_id", EXACT_DOMAINS)
def test_demonstration_passes_and_wrong_answers_fail(domain_id):
    env = _make(domain_id)
    for seed in range(5):
        obs, info = env.reset(seed=seed)
        assert set(info) >= {"domain", "task_id", "demonstration"}
        demo = info["demonstration"]
        assert obs.isascii() and demo.isascii() and not demo.endswith("\n")
        _, reward, terminated, truncated, step_info = env.step(demo)
        assert (reward, terminated, truncated) == (1.0, True, False)
        assert step_info["verdict"] == "PASS" and step_info["success"] and not step_info["infra_error"]
        assert step_info["domain"] == domain_id

        # Whitespace around the answer is tolerated.
        env.reset(seed=seed)
        assert env.step(f"  {demo}\n")[1] == 1.0

        # A well-formed but wrong answer: an integer off by one, or letters changed.
        wrong = str(int(demo) + 1) if demo.lstrip("-").isdigit() else demo + "q"
        env.reset(seed=seed)
        _, reward, terminated, _, step_info = env.step(wrong)
        assert (reward, terminated) == (0.0, True)
        assert step_info["verdict"] in {"FAIL", "MALFORMED"}
        assert demo not in step_info["feedback"] or len(demo) < 2  # feedback never leaks the answer

        env.reset(seed=seed)
        _, reward, _, _, step_info = env.step("#$%")
        assert (reward, step_info["verdict"]) == (0.0, "MALFORMED")
        assert "expected" in step_info["feedback"]


@pytest.mark.parametrize("domain_id", SHORT_DOMAINS)
def test_short_domains_fit_the_tiny_model(domain_id):
    """Tag "short": prompts <= 48 and demonstrations <= 16 ASCII chars."""
    env = _make(domain_id)
    for seed in range(40):
        obs, info = env.reset(seed=seed, options={"split": "train" if seed % 2 else "eval"})
        assert len(obs) <= 48 and obs.isascii(), obs
        assert len(info["demonstration"]) <= 16, info["demonstration"]


@pytest.mark.parametrize("domain_id", ["rlpt/math-add-easy-v0", "rlpt/strings-count-easy-v0", "rlpt/code-linear-easy-v0"])
def test_reset_is_deterministic_in_seed_and_split(domain_id):
    a, b = _make(domain_id), _make(domain_id)
    for seed in range(20):
        for split in splits.SPLITS:
            assert a.reset(seed=seed, options={"split": split}) == b.reset(seed=seed, options={"split": split})
    # Different seeds give different tasks (overwhelmingly).
    prompts = {a.reset(seed=s)[0] for s in range(50)}
    assert len(prompts) > 40


@pytest.mark.parametrize(
    "domain_id",
    ["rlpt/math-add-easy-v0", "rlpt/math-mul-easy-v0", "rlpt/strings-reverse-easy-v0", "rlpt/code-linear-easy-v0"],
)
def test_train_and_eval_are_disjoint(domain_id):
    env = _make(domain_id).unwrapped
    seen = {}
    for split in splits.SPLITS:
        keys, prompts = set(), set()
        for seed in range(2000):
            prompt, _ = env.reset(seed=seed, options={"split": split})
            assert splits.split_of(env.task.key) == split
            keys.add(env.task.key)
            prompts.add(prompt)
        seen[split] = (keys, prompts)
    assert not seen["train"][0] & seen["eval"][0]
    assert not seen["train"][1] & seen["eval"][1]
    assert len(seen["eval"][0]) > 20  # eval is a real set, not a handful of tasks


def test_unknown_split_and_options_rejected():
    env = _make("rlpt/math-add-easy-v0")
    with pytest.raises(ValueError, match="split"):
        env.reset(seed=0, options={"split": "test"})
    with pytest.raises(ValueError, match="options"):
        env.reset(seed=0, options={"split": "train", "bogus": 1})


def test_step_before_reset_and_after_termination_raise():
    env = _make("rlpt/math-add-easy-v0")
    with pytest.raises(RuntimeError, match="before reset"):
        env.step("1")
    env.reset(seed=0)
    env.step("1")
    with pytest.raises(RuntimeError, match="reset"):
        env.step("1")
    env.reset(seed=0)  # reset makes the env usable again
    env.step("1")


def test_bad_action_payloads_are_malformed_not_crashes():
    env = _make("rlpt/math-add-easy-v0")
    obs, info = env.reset(seed=0)
    cases = {
        "": "empty",
        "   \n\t": "empty",
        "1" * 10_000_000: "at most",
        "\ud800": "unencodable",
        b"\xff\xfe": "UTF-8",
        "\u0661\u0662": "expected",  # Arabic-Indic digits are not ASCII integers
    }
    for action, needle in cases.items():
        env.reset(seed=0)
        _, reward, terminated, _, step_info = env.step(action)
        assert (reward, terminated, step_info["verdict"]) == (0.0, True, "MALFORMED"), action[:10]
        assert needle in step_info["feedback"]
    env.reset(seed=0)
    assert env.step(info["demonstration"].encode())[1] == 1.0  # bytes are accepted
    env.reset(seed=0)
    with pytest.raises(TypeError):
        env.step(12)


# One domain of every family: a NUL byte (a byte-level model emits them) is the
# model's fault, never an infrastructure failure that would mask the sample.
ONE_PER_FAMILY = [registry.list_domains(family=f, difficulty="easy")[0].id for f in registry.families()]


@pytest.mark.parametrize("domain_id", ONE_PER_FAMILY)
def test_nul_bytes_get_a_verdict_not_a_sandbox_error(domain_id, request):
    if domain_id in terminal_tasks.BUILTIN_IDS:
        request.getfixturevalue("tbench_images")  # its image, built (or the test skipped)
    env = _make(domain_id)
    for action in ["\x00", "ab\x00cd", "x\x00" * 50]:
        env.reset(seed=1)
        _, reward, terminated, truncated, step_info = env.step(action)
        assert reward == 0.0 and not step_info["infra_error"], (domain_id, step_info)
        assert step_info["verdict"] != "SANDBOX_ERROR"


def test_multi_turn_retry_then_success():
    env = _make("rlpt/math-add-easy-v0", max_attempts=3)
    prompt, info = env.reset(seed=4)
    obs, reward, terminated, truncated, step_info = env.step("-1")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert step_info["attempt"] == 1 and "FAIL" in obs and obs.endswith(prompt)
    assert env.observation_space.contains(obs)
    obs, reward, terminated, truncated, step_info = env.step(info["demonstration"])
    assert (reward, terminated, truncated, step_info["attempt"]) == (1.0, True, False, 2)


def test_multi_turn_truncates_when_attempts_run_out():
    env = _make("rlpt/strings-reverse-easy-v0", max_attempts=2)
    env.reset(seed=0)
    assert env.step("zzz")[2:4] == (False, False)
    _, reward, terminated, truncated, _ = env.step("zzz")
    assert (reward, terminated, truncated) == (0.0, False, True)
    with pytest.raises(RuntimeError):
        env.step("zzz")
    with pytest.raises(ValueError, match="max_attempts"):
        _make("rlpt/strings-reverse-easy-v0", max_attempts=0)
