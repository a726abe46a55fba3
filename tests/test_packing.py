"""Sequence packing (rlpt.packing): the layout round-trips, and packed rows give
every sequence the log-probs and gradients it has alone in its own row."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from rlpt.models import ModelConfig, Transformer
from rlpt.packing import BRANCH_SHIFT, Packing, pack_width, row_ladder
from rlpt.rl import LossConfig, LossCounts, is_per_token, loss_counts
from rlpt.sampling import SamplingParams
from rlpt.steps import (RLBatch, check_packable, init_train_state, rl_train_step,
                        segment_positions_and_mask, sequence_logprobs)

PAD = 0
CFG = ModelConfig(vocab_size=64, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, mlp_dim=64)


def _batch(rng, b=12, l=20):
  """Right-padded rows of random real lengths, a loss mask on each row's tail."""
  tokens = np.zeros((b, l), np.int32)
  mask = np.zeros((b, l - 1), np.float32)
  for i, n in enumerate(rng.integers(3, l + 1, b)):
    tokens[i, :n] = rng.integers(1, CFG.vocab_size, n)
    p = rng.integers(1, n)  # prompt length: targets p..n-1 are trained
    mask[i, p - 1:n - 1] = 1.0
  return tokens, mask


def _groups(rng, groups=4, g=4, l=24, prompt=(6, 12), same_start=0):
  """GRPO-like rows: each group's rows share a prompt (trained from its end on),
  then differ (their first ``same_start`` completion tokens equal)."""
  tokens = np.zeros((groups * g, l), np.int32)
  mask = np.zeros((groups * g, l - 1), np.float32)
  for k in range(groups):
    p = int(rng.integers(*prompt))
    head = rng.integers(1, CFG.vocab_size, p + same_start)
    for j in range(g):
      i = k * g + j
      n = int(rng.integers(p + same_start + 1, l + 1))
      tokens[i, :p + same_start] = head
      tokens[i, p + same_start:n] = rng.integers(1, CFG.vocab_size, n - p - same_start)
      mask[i, p - 1:n - 1] = 1.0
  return tokens, mask


def test_groups_pack_their_prompt_once_and_round_trip():
  rng = np.random.default_rng(3)
  tokens, mask = _groups(rng, same_start=2)
  tree = Packing.plan(tokens, mask, PAD, width=96, group=4)  # a group fits a row
  lengths = Packing.lengths(tokens, mask, PAD)
  # Each group's prompt tokens are held once: its first trained target bounds the prefix.
  prompts = np.array([np.argmax(mask[i] > 0) for i in range(0, 16, 4)])
  np.testing.assert_array_equal(tree.shared_B.reshape(4, 4), np.repeat(prompts[:, None], 4, 1))
  assert tree.real_tokens == lengths.sum() - 3 * prompts.sum() == int((tree.segments() > 0).sum())
  packed, seg = tree.tokens(tokens, PAD), tree.segments()
  for i in range(16):
    s, r = tree.shared_B[i], tree.row_B[i]
    np.testing.assert_array_equal(packed[r, tree.offset_B[i]:tree.offset_B[i] + s], tokens[i, :s])
    c = tree.branch_col_B[i]
    np.testing.assert_array_equal(packed[r, c:c + lengths[i] - s], tokens[i, s:lengths[i]])
    assert (seg[r, c:c + lengths[i] - s] == (tree.branch_B[i] << BRANCH_SHIFT | tree.rank_B[i])).all()
  np.testing.assert_array_equal(tree.unpack(tree.pack(mask)), mask)
  vals = rng.normal(size=mask.shape).astype(np.float32) * mask
  np.testing.assert_array_equal(tree.unpack(tree.pack(vals)), vals)
  with pytest.raises(ValueError, match="16 rows is not whole groups of 5"):
    Packing.plan(tokens, mask, PAD, group=5)


def test_a_group_too_long_for_a_row_is_split_into_pieces_that_fit():
  rng = np.random.default_rng(4)
  tokens, mask = _groups(rng, groups=2, g=8, l=24, prompt=(10, 12))
  tree = Packing.plan(tokens, mask, PAD, group=8)
  assert len({(tree.row_B[i], tree.offset_B[i]) for i in range(8)}) > 1  # several pieces
  seg = tree.segments()
  assert (seg > 0).sum() == tree.real_tokens <= tree.num_rows * tree.width
  np.testing.assert_array_equal(tree.unpack(tree.pack(mask)), mask)


def test_positions_and_mask_of_a_shared_prefix_and_its_branches():
  # Row: piece 1 = prefix [a b] + branches [c d] and [e]; piece 2 = one sequence [f g]; a pad.
  b1, b2 = (1 << BRANCH_SHIFT) | 1, (2 << BRANCH_SHIFT) | 1
  seg = jnp.asarray([[1, 1, b1, b1, b2, 2, 2, 0]], jnp.int32)
  positions, mask = segment_positions_and_mask(seg)
  np.testing.assert_array_equal(positions[0], [0, 1, 2, 3, 2, 0, 1, 0])
  sees = {q: [k for k in range(8) if mask[0, q, k]] for q in range(8)}
  assert sees == {0: [0], 1: [0, 1], 2: [0, 1, 2], 3: [0, 1, 2, 3], 4: [0, 1, 4],
                  5: [5], 6: [5, 6], 7: [7]}


def test_layout_round_trips_and_fills_rows():
  rng = np.random.default_rng(0)
  tokens, mask = _batch(rng, b=40, l=24)
  p = Packing.plan(tokens, mask, PAD, row_multiple=4)
  assert p.num_rows % 4 == 0 and p.num_rows < len(tokens)
  packed = p.tokens(tokens, PAD)
  seg = p.segments()
  lengths = Packing.lengths(tokens, mask, PAD)
  for b in range(len(tokens)):
    r, o, n = p.row_B[b], p.offset_B[b], lengths[b]
    np.testing.assert_array_equal(packed[r, o:o + n], tokens[b, :n])
    assert len(set(seg[r, o:o + n].tolist())) == 1 and seg[r, o] > 0
  # No two sequences overlap and no row overflows.
  assert (seg > 0).sum() == lengths.sum() and (p.offset_B + lengths <= p.width).all()
  np.testing.assert_array_equal(p.unpack(p.pack(mask)), mask)
  vals = rng.normal(size=mask.shape).astype(np.float32) * mask
  np.testing.assert_array_equal(p.unpack(p.pack(vals)), vals)
  assert abs(p.fill - lengths.sum() / (p.num_rows * p.width)) < 1e-12
  # Deterministic: the same batch packs the same way.
  q = Packing.plan(tokens, mask, PAD, row_multiple=4)
  np.testing.assert_array_equal(q.row_B, p.row_B)
  np.testing.assert_array_equal(q.offset_B, p.offset_B)


def test_rows_wider_than_the_batch_round_trip():
  rng = np.random.default_rng(2)
  tokens, mask = _batch(rng, b=30, l=22)
  w = pack_width(22)
  assert w == 24
  p = Packing.plan(tokens, mask, PAD, row_multiple=2, width=w)
  assert p.width == 24 and p.batch_width == 22
  assert p.tokens(tokens, PAD).shape == (p.num_rows, 24) and p.pack(mask).shape == (p.num_rows, 23)
  np.testing.assert_array_equal(p.unpack(p.pack(mask)), mask)
  assert p.num_rows <= Packing.plan(tokens, mask, PAD, row_multiple=2).num_rows
  with pytest.raises(ValueError, match="width 20 cannot hold this batch's rows of width 22"):
    Packing.plan(tokens, mask, PAD, width=20)


def test_pack_width_ladder():
  got = [pack_width(w) for w in (1, 3, 4, 5, 7, 9, 17, 72, 88, 96, 97, 136, 193)]
  assert got == [1, 3, 4, 6, 8, 12, 24, 96, 96, 96, 128, 192, 256]
  for w in range(1, 3000):
    assert w <= pack_width(w) <= max(w, 1.5 * (w - 1))


def test_row_ladder_bounds_padding_and_shapes():
  assert [row_ladder(u) for u in (1, 4, 5, 8, 9, 11, 13, 15, 17, 33, 100)] == [
      1, 4, 5, 8, 10, 12, 14, 16, 20, 40, 112]
  for u in range(1, 5000):
    assert u <= row_ladder(u) < 1.25 * u + 1
  # 4 rungs an octave: a batch whose packed rows range over 2x compiles about 4 shapes.
  assert len({row_ladder(u) for u in range(40, 80)}) == 5
  rng = np.random.default_rng(5)
  tokens, mask = _batch(rng, b=64, l=24)
  plain = Packing.plan(tokens, mask, PAD, row_multiple=2)
  laddered = Packing.plan(tokens, mask, PAD, row_multiple=2, ladder=True)
  assert laddered.num_rows == 2 * row_ladder(plain.num_rows // 2) >= plain.num_rows
  np.testing.assert_array_equal(laddered.row_B, plain.row_B)  # only padding rows are added
  np.testing.assert_array_equal(laddered.unpack(laddered.pack(mask)), mask)


def test_a_full_row_and_a_pad_token_inside_a_completion():
  """A sequence filling its row keeps every target; a sampled pad token inside a
  completion (trained: its mask is 1) still counts as the sequence's."""
  tokens = np.array([[5, 6, 7, 8], [5, 6, PAD, 0]], np.int32)
  mask = np.array([[0, 1, 1], [0, 1, 0]], np.float32)
  p = Packing.plan(tokens, mask, PAD)
  np.testing.assert_array_equal(Packing.lengths(tokens, mask, PAD), [4, 3])
  np.testing.assert_array_equal(p.unpack(p.pack(mask)), mask)


@pytest.mark.parametrize("loss_cfg", [
    LossConfig(policy_loss="ppo_clip", kl_beta=0.04, kl_estimator="k3", aggregation="token-mean"),
    LossConfig(policy_loss="dual_clip", kl_beta=0.0, aggregation="seq-mean-token-sum-norm",
               norm_len=16, entropy_coef=0.01),
], ids=["ppo_token_mean", "dual_clip_dr_grpo"])
@pytest.mark.parametrize("group", [1, 4], ids=["sequences", "groups"])
def test_packed_logprobs_and_update_equal_one_sequence_per_row(loss_cfg, group):
  """Log-probs 1e-5; updated parameters 1e-6 and the metrics 1e-5 (one AdamW
  step of lr 1e-3 moves the weights by about 1e-3). ``groups``: GRPO groups
  whose prompt (and first completion token) the packed rows hold once."""
  assert is_per_token(loss_cfg)
  rng = np.random.default_rng(1)
  tokens, mask = _batch(rng) if group == 1 else _groups(rng, groups=3, same_start=1, l=20)
  graphdef, params = nnx.split(Transformer(CFG, nnx.Rngs(0)))
  sampling = SamplingParams(1.0)
  check_packable(CFG)
  plain = np.asarray(sequence_logprobs(graphdef, params, jnp.asarray(tokens), sampling))
  p = Packing.plan(tokens, mask, PAD, row_multiple=2, width=pack_width(tokens.shape[1]),
                   group=group)
  assert p.num_rows < len(tokens) and p.width > tokens.shape[1]
  assert (p.branch_B > 0).all() == (group > 1)
  got = sequence_logprobs(graphdef, params, jnp.asarray(p.tokens(tokens, PAD)), sampling,
                          segments_BxL=jnp.asarray(p.segments()))
  m = mask > 0
  np.testing.assert_allclose(p.unpack(np.asarray(got))[m], plain[m], atol=1e-5, rtol=0)

  old = plain + rng.normal(scale=0.05, size=plain.shape).astype(np.float32)
  ref = plain - 0.02
  adv = (rng.normal(size=(len(tokens), 1)) * mask).astype(np.float32)
  counts = LossCounts(*loss_counts(jnp.asarray(mask)))
  optimizer = optax.adamw(1e-3)
  results = []
  for batch in (RLBatch(tokens, mask, old * mask, ref * mask, adv),
                RLBatch(p.tokens(tokens, PAD), *(p.pack(x) for x in (mask, old * mask, ref * mask,
                                                                      adv)), p.segments())):
    state = init_train_state(jax.tree.map(jnp.copy, params), optimizer)
    state, metrics = rl_train_step(state, jax.tree.map(jnp.asarray, batch), counts,
                                   jnp.float32(0.04), graphdef=graphdef, optimizer=optimizer,
                                   loss_cfg=loss_cfg, sampling=sampling)
    results.append((state.params, metrics))
  (pa, ma), (pb, mb) = results
  # Adam's first step moves each weight by lr * g / (|g| + eps): a weight whose
  # gradient is near eps moves by a visible share of lr (1e-3) for a rounding
  # difference in g, so 2e-6 (0.2% of the step), not fp32 precision.
  for x, y in zip(jax.tree.leaves(pa), jax.tree.leaves(pb)):
    np.testing.assert_allclose(np.asarray(y), np.asarray(x), atol=2e-6, rtol=0)
  for k in ma:
    np.testing.assert_allclose(float(mb[k]), float(ma[k]), rtol=1e-5, atol=1e-6, err_msg=k)


def test_losses_that_pool_a_sequence_are_not_packed():
  assert not is_per_token(LossConfig(policy_loss="gspo"))
  assert not is_per_token(LossConfig(aggregation="seq-mean-token-mean"))
  with pytest.raises(ValueError, match="attention_impl 'blockwise'"):
    check_packable(ModelConfig(attention_impl="blockwise"))
