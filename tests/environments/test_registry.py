"""Registry filtering, lookup errors, and gymnasium registration."""

import dataclasses
import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import environments  # noqa: F401  (registers domains)
from environments import registry
from environments.registry import DomainSpec

PHASE1_IDS = [
    "rlpt/math-add-easy-v0",
    "rlpt/math-add-medium-v0",
    "rlpt/math-sub-easy-v0",
    "rlpt/math-mul-easy-v0",
    "rlpt/strings-reverse-easy-v0",
    "rlpt/strings-upper-easy-v0",
    "rlpt/strings-sort-easy-v0",
    "rlpt/strings-count-easy-v0",
    "rlpt/code-linear-easy-v0",
]


def test_required_domains_registered():
    ids = {s.id for s in registry.list_domains()}
    assert set(PHASE1_IDS) <= ids
    assert any(s.family == "code" and s.difficulty == "medium" for s in registry.list_domains())


def test_filters():
    every = registry.list_domains()
    assert [s.id for s in every] == sorted(s.id for s in every)
    maths = registry.list_domains(family="math")
    assert maths and all(s.family == "math" for s in maths)
    easy_strings = registry.list_domains(family="strings", difficulty="easy")
    assert easy_strings and all(s.family == "strings" and s.difficulty == "easy" for s in easy_strings)
    sandboxed = registry.list_domains(tag="sandbox")
    assert sandboxed and all("sandbox" in s.tags for s in sandboxed)
    assert registry.list_domains(family="no-such-family") == []
    with pytest.raises(ValueError, match="difficulty"):
        registry.list_domains(difficulty="impossible")
    assert {s.family for s in every} == set(registry.families())


def test_get_and_unknown_id_suggests_close_matches():
    spec = registry.get("rlpt/math-add-easy-v0")
    assert isinstance(spec, DomainSpec)
    assert (spec.family, spec.difficulty) == ("math", "easy")
    assert isinstance(spec.tags, tuple)
    with pytest.raises(ValueError) as err:
        registry.get("rlpt/math-add-eazy-v0")
    assert "rlpt/math-add-eazy-v0" in str(err.value)
    assert "rlpt/math-add-easy-v0" in str(err.value)


def test_spec_validation():
    with pytest.raises(ValueError, match="difficulty"):
        DomainSpec("rlpt/x-y-v0", "x", "trivial", (), 8, 8)
    with pytest.raises(ValueError, match="family"):
        DomainSpec("rlpt/x-y-v0", "z", "easy", (), 8, 8)
    with pytest.raises(ValueError, match="look like"):
        DomainSpec("math-add", "math", "easy", (), 8, 8)


def test_duplicate_registration_rejected():
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.domain("rlpt/math-add-easy-v0"))


# The domains registered on import, listed at collection: other tests register
# dataset domains of their own (some with no train rows) in the same process.
BUILTIN = registry.list_domains()


def test_gymnasium_make_every_domain():
    for spec in BUILTIN:
        env = gymnasium.make(spec.id)
        offered = getattr(registry.domain(spec.id), "splits", ("train", "eval"))  # eval-only benchmarks
        obs, info = env.reset(seed=0, options={"split": offered[0]})
        assert env.observation_space.contains(obs)
        assert info["domain"] == spec.id
        assert len(obs) <= spec.max_prompt_chars
        assert len(info["demonstration"].strip()) <= spec.max_answer_chars
        env.close()


@pytest.mark.parametrize("domain_id", ["rlpt/math-add-easy-v0", "rlpt/strings-reverse-easy-v0", "rlpt/code-linear-easy-v0"])
def test_gymnasium_env_checker(domain_id):
    env = gymnasium.make(domain_id).unwrapped
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any checker complaint fails the test
        check_env(env, skip_render_check=True)


def test_unregister_removes_the_domain_here_and_from_gymnasium():
    spec = dataclasses.replace(registry.get("rlpt/math-add-easy-v0"), id="rlpt/math-addcopy-easy-v0")
    registry.register(_Copy(spec, registry.domain("rlpt/math-add-easy-v0")))
    assert gymnasium.make(spec.id) is not None
    registry.unregister(spec.id)
    assert not registry.is_registered(spec.id) and spec.id not in gymnasium.registry
    with pytest.raises(ValueError, match="rlpt/math-addcopy-easy-v0"):
        registry.unregister(spec.id)
    registry.register(_Copy(spec, registry.domain("rlpt/math-add-easy-v0")))  # the id is free again
    registry.unregister(spec.id)


class _Copy(registry.Domain):
    def __init__(self, spec, base):
        self.spec, self.base = spec, base

    def sample(self, rng):
        return self.base.sample(rng)

    def grade(self, task, answer):
        return self.base.grade(task, answer)
