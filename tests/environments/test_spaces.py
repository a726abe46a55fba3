"""AnyText: the observation/action space for free-form text."""

import numpy as np
import pytest

from environments.spaces import AnyText


def test_contains_any_str_up_to_max_length():
    space = AnyText(5)
    for s in ["", "abc", "\u4e2d\u6587!?", "\x00\n\t", "\ud800", "12345"]:
        assert space.contains(s), s
    assert "abcde" in space
    assert not space.contains("abcdef")
    assert not space.contains(b"abc")
    assert not space.contains(None)
    assert not space.contains(12)


def test_sample_is_contained_and_seeded():
    a, b = AnyText(20, seed=3), AnyText(20, seed=3)
    samples = [a.sample() for _ in range(200)]
    assert samples == [b.sample() for _ in range(200)]
    assert all(a.contains(s) for s in samples)
    lengths = {len(s) for s in samples}
    assert min(lengths) <= 2 and max(lengths) >= 18  # lengths span [0, max_length]
    assert any(ord(c) > 127 for s in samples for c in s)  # exercises non-ASCII


def test_sample_restricted_charset_and_masks_rejected():
    space = AnyText(8, sample_chars="ab", seed=0)
    assert set("".join(space.sample() for _ in range(50))) == {"a", "b"}
    with pytest.raises(ValueError):
        space.sample(mask=np.ones(2, np.int8))


def test_equality_and_validation():
    assert AnyText(4) == AnyText(4) and AnyText(4) != AnyText(5)
    assert hash(AnyText(4)) == hash(AnyText(4))
    assert "AnyText(4)" == repr(AnyText(4))
    with pytest.raises(ValueError):
        AnyText(-1)
