"""A Hugging Face base goes onto the mesh shard by shard, as the rules lay it out,
and the trainable copy never aliases the reference (the update donates it)."""

import os

import jax

from experiments import grpo_hf_import
from rlpt.config import TrainConfig, from_config_dict
from rlpt.sharding import state_shardings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_hf_base_is_laid_out_by_the_rules_without_aliasing(tmp_path, monkeypatch):
  monkeypatch.chdir(ROOT)
  from rlpt.trainer import Trainer
  cd = grpo_hf_import.get_config("smoke")
  cd.progress = False
  cd.checkpoint.every = 0
  cd.mesh.update(data=2, fsdp=4)
  trainer = Trainer(from_config_dict(TrainConfig, cd), str(tmp_path))
  try:
    want = state_shardings(trainer.actor.ref_params, trainer.mesh, trainer.actor.rules)
    for ref, policy, sh in zip(jax.tree.leaves(trainer.actor.ref_params),
                               jax.tree.leaves(trainer.actor.state.params), jax.tree.leaves(want)):
      assert ref.sharding.is_equivalent_to(sh, ref.ndim)
      assert policy.sharding.is_equivalent_to(sh, policy.ndim)
      assert (ref.addressable_shards[0].data.unsafe_buffer_pointer() !=
              policy.addressable_shards[0].data.unsafe_buffer_pointer())
    assert any(len({str(s.index) for s in x.addressable_shards}) > 1
               for x in jax.tree.leaves(trainer.actor.ref_params))  # fsdp really splits something
    trainer.train_step()  # donating the policy leaves the reference intact
    jax.tree.map(lambda x: x.block_until_ready(), trainer.actor.ref_params)
  finally:
    trainer.close()
