"""Unit tests of registry/factory/input_bounds.py on hand-made graphs (no Django, no files).

Each bounded case also runs the graph in ONNX Runtime: on the synthesized inputs it must
run, and one past the derived bound (where the bound is tight) it must fail, so a bound
that is too loose or too tight fails the test."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from registry.factory.input_bounds import InputsUnbounded, plan_inputs, synthesize

I64, F32 = TensorProto.INT64, TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _table(rows, dim=4, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)


def _run(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _embedding(rows, pre_nodes=(), ids="ids", dtype=I64, extra_inits=()):
    nodes = list(pre_nodes) + [
        helper.make_node("Gather", ["W", ids], ["e"], name="emb"),
        helper.make_node("ReduceSum", ["e"], ["y"], keepdims=0),
    ]
    return _model(nodes, [("x", dtype, ["batch", 3])], [("y", F32, [])], [("W", _table(rows)), *extra_inits])


def test_gather_bounds_ids_by_table_rows_and_the_bound_is_tight():
    model = _embedding(1000, ids="x")
    plans = plan_inputs(model)
    assert plans["x"].kind == "index" and plans["x"].high == 1000 and "emb" in plans["x"].bounded_by[0]
    feeds = synthesize(plans, 64)
    assert feeds["x"].shape == (64, 3) and feeds["x"].max() < 1000
    _run(model, feeds)
    with pytest.raises(Exception, match="out of"):
        _run(model, {"x": np.full((2, 3), 1000, dtype=np.int64)})


def test_mod_by_a_constant_frees_the_raw_ids():
    model = _embedding(
        100, [helper.make_node("Mod", ["x", "vocab"], ["b"])], ids="b", extra_inits=[("vocab", np.array(100, np.int64))]
    )
    plans = plan_inputs(model, int_high=1_000_000)
    assert plans["x"].kind == "index" and plans["x"].high == 1_000_000
    feeds = synthesize(plans, 256)
    assert feeds["x"].max() > 100  # raw hashed ids, not table rows
    _run(model, feeds)


def test_mod_larger_than_the_table_is_bounded_by_the_table():
    model = _embedding(
        50, [helper.make_node("Mod", ["x", "vocab"], ["b"])], ids="b", extra_inits=[("vocab", np.array(80, np.int64))]
    )
    assert plan_inputs(model)["x"].high == 50


def test_cast_and_offset_are_followed():
    pre = [helper.make_node("Cast", ["x"], ["x64"], to=I64), helper.make_node("Add", ["x64", "five"], ["b"])]
    model = _embedding(50, pre, ids="b", dtype=TensorProto.INT32, extra_inits=[("five", np.array(5, np.int64))])
    plans = plan_inputs(model)
    assert plans["x"].high == 45 and plans["x"].dtype == "int32"
    _run(model, synthesize(plans, 32))
    with pytest.raises(Exception):  # noqa: B017 - ONNX Runtime raises its own error types
        _run(model, {"x": np.full((1, 3), 45, dtype=np.int32)})


def test_columns_of_one_id_input_take_the_smallest_table():
    """ids[:, 0] -> table of 30 rows, ids[:, 1] -> table of 7 rows (a two-tower layout)."""
    nodes = [
        helper.make_node("Gather", ["x", "c0"], ["u"], axis=1),
        helper.make_node("Gather", ["x", "c1"], ["i"], axis=1),
        helper.make_node("Gather", ["U", "u"], ["eu"], name="user_emb"),
        helper.make_node("Gather", ["I", "i"], ["ei"], name="item_emb"),
        helper.make_node("Mul", ["eu", "ei"], ["p"]),
        helper.make_node("ReduceSum", ["p", "ax"], ["y"], keepdims=1),
    ]
    model = _model(
        nodes,
        [("x", I64, ["batch", 2])],
        [("y", F32, ["batch", 1])],
        [
            ("c0", np.array(0, np.int64)),
            ("c1", np.array(1, np.int64)),
            ("U", _table(30)),
            ("I", _table(7)),
            ("ax", np.array([1], np.int64)),
        ],
    )
    plans = plan_inputs(model)
    assert plans["x"].high == 7 and len(plans["x"].bounded_by) == 2
    _run(model, synthesize(plans, 16))


def test_clip_frees_the_input_and_a_remap_table_bounds_the_second_lookup():
    clip = _embedding(
        100,
        [helper.make_node("Clip", ["x", "lo", "hi"], ["b"])],
        ids="b",
        extra_inits=[("lo", np.array(0, np.int64)), ("hi", np.array(99, np.int64))],
    )
    assert plan_inputs(clip, int_high=5000)["x"].high == 5000
    remap = _embedding(
        10,
        [helper.make_node("Gather", ["R", "x"], ["b"], name="remap")],
        ids="b",
        extra_inits=[("R", np.arange(20, dtype=np.int64) % 10)],
    )
    plans = plan_inputs(remap)
    assert plans["x"].high == 20  # bounded by the remap table, whose values all fit the embedding
    _run(remap, synthesize(plans, 64))


def test_two_inputs_meeting_in_one_index_are_shrunk_together():
    nodes = [
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Gather", ["W", "s"], ["e"], name="emb"),
        helper.make_node("ReduceSum", ["e"], ["y"], keepdims=0),
    ]
    model = _model(nodes, [("a", I64, ["batch"]), ("b", I64, ["batch"])], [("y", F32, [])], [("W", _table(100))])
    plans = plan_inputs(model)
    assert (plans["a"].high - 1) + (plans["b"].high - 1) <= 99
    _run(model, synthesize(plans, 128))


def test_an_op_it_cannot_follow_names_the_input_and_the_op():
    model = _embedding(
        100,
        [helper.make_node("CumSum", ["x", "axis"], ["b"], name="running")],
        ids="b",
        extra_inits=[("axis", np.array(1, np.int64))],
    )
    with pytest.raises(InputsUnbounded, match=r"input 'x'.*CumSum 'running'.*cannot follow") as exc:
        plan_inputs(model)
    assert exc.value.input_name == "x"


def test_an_input_used_as_a_shape_cannot_be_bounded():
    nodes = [helper.make_node("Reshape", ["v", "x"], ["y"])]
    model = _model(nodes, [("v", F32, [6]), ("x", I64, [2])], [("y", F32, [2, 3])])
    with pytest.raises(InputsUnbounded, match=r"input 'x'.*operand 1.*Reshape"):
        plan_inputs(model)


def test_string_inputs_are_refused_clearly():
    nodes = [helper.make_node("Identity", ["s"], ["y"])]
    model = _model(nodes, [("s", TensorProto.STRING, ["batch", 1])], [("y", TensorProto.STRING, ["batch", 1])])
    with pytest.raises(InputsUnbounded, match="input 's' is a string tensor"):
        plan_inputs(model)


def test_floats_bools_free_integers_and_dynamic_dimensions():
    nodes = [
        helper.make_node("Cast", ["n"], ["nf"], to=F32),
        helper.make_node("Cast", ["m"], ["mf"], to=F32),
        helper.make_node("Add", ["f", "nf"], ["s"]),
        helper.make_node("Mul", ["s", "mf"], ["y"]),
    ]
    model = _model(
        nodes,
        [("f", F32, ["batch", "seq"]), ("n", I64, ["batch", 1]), ("m", TensorProto.BOOL, ["batch", 1])],
        [("y", F32, ["batch", "seq"])],
    )
    plans = plan_inputs(model, int_high=1000)
    assert {p.kind for p in plans.values()} == {"float", "integer", "bool"}
    assert plans["n"].high == 1000 and plans["f"].shape == [-1, -1]
    feeds = synthesize(plans, 10, dynamic_size=5)
    assert feeds["f"].shape == (10, 5) and np.abs(feeds["f"]).max() <= 3.0 and feeds["m"].dtype == np.bool_
    _run(model, feeds)


def test_a_float_cast_to_an_index_is_checked():
    nodes = [
        helper.make_node("Mul", ["f", "k"], ["g"]),
        helper.make_node("Cast", ["g"], ["i"], to=I64),
        helper.make_node("Gather", ["W", "i"], ["e"], name="bucket"),
        helper.make_node("ReduceSum", ["e"], ["y"], keepdims=0),
    ]
    model = _model(
        nodes, [("f", F32, ["batch"])], [("y", F32, [])], [("W", _table(10)), ("k", np.array(1000.0, np.float32))]
    )
    with pytest.raises(InputsUnbounded, match=r"input 'f'.*bucket.*10 rows"):
        plan_inputs(model)


def test_an_input_read_inside_a_subgraph_cannot_be_bounded():
    """An If whose branch gathers with the outer id input (captured, not listed as an input)."""
    then_graph = helper.make_graph(
        [helper.make_node("Gather", ["W", "x"], ["e_then"], name="inner_lookup")],
        "then",
        [],
        [helper.make_tensor_value_info("e_then", F32, ["batch", 4])],
    )
    else_graph = helper.make_graph(
        [helper.make_node("Gather", ["W", "zero"], ["e_else"])],
        "else",
        [],
        [helper.make_tensor_value_info("e_else", F32, [1, 4])],
    )
    nodes = [
        helper.make_node("Constant", [], ["cond"], value=numpy_helper.from_array(np.array(True))),
        helper.make_node("If", ["cond"], ["y"], then_branch=then_graph, else_branch=else_graph, name="branch"),
    ]
    model = _model(
        nodes, [("x", I64, ["batch"])], [("y", F32, ["n", 4])], [("W", _table(10)), ("zero", np.zeros(1, np.int64))]
    )
    with pytest.raises(InputsUnbounded, match=r"input 'x'.*inside a subgraph of If 'branch'"):
        plan_inputs(model)
