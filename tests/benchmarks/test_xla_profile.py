"""benchmarks/xla_profile.py on a program whose matmul FLOPs are known."""

import os
import sys

import jax
import jax.numpy as jnp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import xla_profile  # noqa: E402


def test_a_traced_program_reports_its_matmul_flops_and_op_kinds(tmp_path, capsys):
  def layer(x, w):  # two matmuls of 2 * 64 * 128 * 96 and 2 * 64 * 96 * 128 FLOPs
    return jnp.tanh(x @ w) @ w.T

  fn = jax.jit(layer)
  x, w = jnp.ones((64, 128)), jnp.ones((128, 96)) / 128
  jax.block_until_ready(fn(x, w))
  events, trace_file = xla_profile.trace(lambda: jax.block_until_ready(fn(x, w)), str(tmp_path))
  assert trace_file.startswith(str(tmp_path))
  modules = xla_profile.op_times(events)
  assert "jit_layer" in modules
  total, count = modules["jit_layer"]
  assert total and all(n >= 1 for n in count.values())
  hlo = fn.lower(x, w).compile().as_text()
  want = 2 * (2.0 * 64 * 128 * 96)  # the ops that ran hold exactly the two products
  out = xla_profile.report(total, count, hlo, roof_gflops=100.0)
  assert abs(out["matmul_gflop"] - want / 1e9) < 1e-9
  assert 0 < out["matmul_ms"] <= out["ms"] and out["of_roof"] <= out["of_roof_matmuls_only"]
  assert abs(sum(out["by_kind_ms"].values()) - out["ms"]) < 1e-9
  assert "ceiling (per call)" in capsys.readouterr().out


def test_dot_flops_reads_contracted_sizes_and_fusions():
  hlo = """HloModule m

%fused (p0: f32[8,32], p1: f32[32,16]) -> f32[8,16] {
  %p0 = f32[8,32]{1,0} parameter(0)
  %p1 = f32[32,16]{1,0} parameter(1)
  ROOT %dot.1 = f32[8,16]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (a: f32[8,32], b: f32[32,16]) -> f32[8,16] {
  %a = f32[8,32]{1,0} parameter(0)
  %b = f32[32,16]{1,0} parameter(1)
  ROOT %fusion.7 = f32[8,16]{1,0} fusion(%a, %b), kind=kOutput, calls=%fused
}
"""
  flops = xla_profile.dot_flops(hlo)
  assert flops["dot.1"] == 2.0 * 8 * 16 * 32 and flops["fusion.7"] == flops["dot.1"]
  assert xla_profile.describe(hlo, "fusion.7") == ("f32[8,16]{1,0}", {"dot"})
  assert xla_profile.kind_of({"dot"}) == "matmul" and xla_profile.kind_of({"dot", "add"}) == "matmul+fused"
  assert xla_profile.kind_of({"reduce", "add"}) == "reduction"
  assert xla_profile.kind_of({"transpose"}) == "copy/transpose"
  assert xla_profile.kind_of({"exponential"}) == "element-wise"
