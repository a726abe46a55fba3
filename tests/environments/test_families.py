"""Every registered domain, plus family-specific verifier behaviour."""

import gymnasium
import pytest

import environments  # noqa: F401
from environments import registry, splits
from environments.cad import runner as cad_runner
from environments.families import csg, longctx

ALL = [s.id for s in registry.list_domains()]


def test_catalogue_size_and_coverage():
    assert len(ALL) >= 200
    fams = registry.families()
    assert {"math", "strings", "code", "terminal", "documents", "cad", "longctx"} <= set(fams)
    for family in fams:
        assert {s.difficulty for s in registry.list_domains(family=family)} == {"easy", "medium", "hard"}, family


@pytest.mark.parametrize("domain_id", ALL)
def test_every_domain_demonstration_passes_and_garbage_does_not(domain_id, request):
    spec = registry.get(domain_id)
    if spec.family == "tbench":
        request.getfixturevalue("tbench_images")  # terminal tasks run in their built images
    if "build123d" in spec.tags and not cad_runner.available()[0]:
        pytest.skip(f"{domain_id} needs the cad extra: {cad_runner.available()[1]}")
    env = gymnasium.make(domain_id)
    offered = getattr(registry.domain(domain_id), "splits", splits.SPLITS)  # eval-only benchmarks offer one
    for seed, split in ((0, "train"), (1, "eval")):
        if split not in offered:
            with pytest.raises(ValueError, match=split):
                gymnasium.make(domain_id).reset(seed=seed, options={"split": split})
            continue
        obs, info = env.reset(seed=seed, options={"split": split})
        assert len(obs.encode("utf-8")) <= spec.max_prompt_chars  # UTF-8 text (rg questions are not all ASCII)
        if offered == splits.SPLITS:
            assert splits.split_of(env.unwrapped.task.key) == split
        _, reward, terminated, _, step_info = env.step(info["demonstration"])
        assert (reward, terminated, step_info["verdict"]) == (1.0, True, "PASS"), (obs, info, step_info)
    env.reset(seed=2, options={"split": offered[-1]})
    _, reward, _, _, step_info = env.step("@@@ ???")
    assert reward < 1.0 and step_info["verdict"] != "PASS" and not step_info["infra_error"]


def _grade(domain_id, answer, seed=0):
    env = gymnasium.make(domain_id)
    _, info = env.reset(seed=seed)
    _, reward, _, _, step_info = env.step(answer(info["demonstration"]) if callable(answer) else answer)
    return reward, step_info["verdict"], step_info["feedback"]


def test_documents_numeric_tolerance_and_formats():
    demo_of = lambda d: d  # noqa: E731
    assert _grade("rlpt/documents-total-medium-v0", demo_of)[0] == 1.0
    assert _grade("rlpt/documents-total-medium-v0", lambda d: f"${int(d):,}")[0] == 1.0
    assert _grade("rlpt/documents-margin-hard-v0", lambda d: f"{float(d) + 0.0001:.4f}%")[0] == 1.0
    assert _grade("rlpt/documents-total-medium-v0", lambda d: str(int(d) * 2 + 100))[:2] == (0.0, "FAIL")
    assert _grade("rlpt/documents-lookup-easy-v0", "twelve")[:2] == (0.0, "MALFORMED")
    assert _grade("rlpt/documents-argmax-hard-v0", lambda d: d.upper())[0] == 1.0


def test_csg_partial_credit_and_hostile_programs():
    grid = csg.voxelize(csg.parse("box(0,0,0,4,4,4)"), 8)
    assert grid.sum() == 64
    half = csg.voxelize(csg.parse("difference(box(0,0,0,4,4,4),box(0,0,2,4,4,4))"), 8)
    assert half.sum() == 32
    env = gymnasium.make("rlpt/cad-csg-box-easy-v0").unwrapped
    env.reset(seed=0)
    target = csg.voxelize(csg.parse(env.task.hidden), 8)
    # Adding one voxel-thick slab outside the target gives partial credit.
    answer = f"union({env.task.hidden},box(0,0,0,8,8,1))"
    cand = csg.voxelize(csg.parse(answer), 8)
    _, reward, _, _, info = env.step(answer)
    assert info["verdict"] in ("FAIL", "PASS")
    assert reward == pytest.approx((cand & target).sum() / (cand | target).sum())
    for hostile in ["__import__('os')", "union(" * 20 + "box(0,0,0,1,1,1)", "box(1,2)", "box(0,0,0,1,1,1) box", "sphere(1e9,0,0,1)"]:
        env.reset(seed=0)
        assert env.step(hostile)[4]["verdict"] == "MALFORMED", hostile


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
