"""External data: read relative to the model's folder, and nothing outside it is ever opened."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, external_data_helper, helper, numpy_helper

from onnxjit.errors import ModelError
from onnxjit.importer import load_model, model_hash

W = np.arange(12, dtype=np.float32).reshape(3, 4)


def make_model(location: str, offset: int | None = None, length: int | None = None,
               dims=(3, 4)) -> onnx.ModelProto:
    """A model whose initializer 'w' (float32, `dims`) lives in external file `location`."""
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=list(dims))
    t.data_location = TensorProto.EXTERNAL
    entries = {"location": location}
    if offset is not None:
        entries["offset"] = str(offset)
    if length is not None:
        entries["length"] = str(length)
    for k, v in entries.items():
        e = t.external_data.add()
        e.key, e.value = k, v
    g = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(dims))],
                          initializer=[t])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def save(folder: Path, model: onnx.ModelProto, name: str = "model.onnx") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    p.write_bytes(model.SerializeToString())
    return p


def weights(m) -> np.ndarray:
    return m.graph.initializers[0].const


# ---------------------------------------------------------------------------------- good cases


def test_onnx_saved_external_data_loads(tmp_path):
    big = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    small = np.array([1, 2, 3], np.int64)
    g = helper.make_graph(
        [helper.make_node("Identity", ["big"], ["y"]), helper.make_node("Identity", ["s"], ["z"])],
        "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64]),
                  helper.make_tensor_value_info("z", TensorProto.INT64, [3])],
        initializer=[numpy_helper.from_array(big, "big"), numpy_helper.from_array(small, "s")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    path = tmp_path / "m" / "model.onnx"
    (path.parent / "weights").mkdir(parents=True)
    onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights/data.bin", size_threshold=0)
    assert (tmp_path / "m" / "weights" / "data.bin").is_file()
    got = {v.name: v.const for v in load_model(path).graph.initializers}
    np.testing.assert_array_equal(got["big"], big)
    np.testing.assert_array_equal(got["s"], small)


def test_offset_and_length(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"HEADER!!" + W.tobytes() + b"trailer")
    got = load_model(save(tmp_path, make_model("w.bin", offset=8, length=48)))
    np.testing.assert_array_equal(weights(got), W)
    assert weights(got).flags.writeable


def test_bytes_with_base_dir(tmp_path):
    (tmp_path / "w.bin").write_bytes(W.tobytes())
    m = make_model("w.bin")
    np.testing.assert_array_equal(weights(load_model(m.SerializeToString(), base_dir=tmp_path)), W)
    np.testing.assert_array_equal(weights(load_model(m, base_dir=str(tmp_path))), W)


def test_symlink_inside_folder_is_followed(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "w.bin").write_bytes(W.tobytes())
    os.symlink("real/w.bin", tmp_path / "link.bin")
    np.testing.assert_array_equal(weights(load_model(save(tmp_path, make_model("link.bin")))), W)


def test_model_folder_reached_through_a_symlink(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "w.bin").write_bytes(W.tobytes())
    save(tmp_path / "d", make_model("w.bin"))
    os.symlink(tmp_path / "d", tmp_path / "alias")
    np.testing.assert_array_equal(weights(load_model(tmp_path / "alias" / "model.onnx")), W)


def test_external_data_in_attribute_tensor(tmp_path):
    (tmp_path / "c.bin").write_bytes(W.tobytes())
    t = TensorProto(name="c", data_type=TensorProto.FLOAT, dims=[3, 4])
    t.raw_data = b"placeholder"  # set_external_data wants raw_data to move out
    external_data_helper.set_external_data(t, location="c.bin")
    t.ClearField("raw_data")
    g = helper.make_graph([helper.make_node("Constant", [], ["y"], value=t)], "g", [],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    node = load_model(save(tmp_path, m)).graph.nodes[0]
    np.testing.assert_array_equal(node.attrs["value"], W)


# ---------------------------------------------------------------------------------- refusals


def test_bytes_without_base_dir_is_refused(tmp_path):
    (tmp_path / "w.bin").write_bytes(W.tobytes())
    m = make_model("w.bin")
    with pytest.raises(ModelError, match="'w'.*external file 'w.bin'.*base_dir"):
        load_model(m.SerializeToString())
    with pytest.raises(ModelError, match="base_dir"):
        load_model(m)


@pytest.mark.parametrize("location", ["/etc/passwd", "\\etc\\passwd", "C:\\secret.bin",
                                      "c:/secret.bin"])
def test_absolute_location_is_refused(tmp_path, location):
    with pytest.raises(ModelError, match="'w'.*absolute"):
        load_model(save(tmp_path, make_model(location)))


@pytest.mark.parametrize("location", ["../outside.bin", "sub/../../outside.bin",
                                      "sub/../w.bin", "..\\outside.bin", ".."])
def test_dotdot_is_refused(tmp_path, location):
    (tmp_path / "outside.bin").write_bytes(W.tobytes())
    (tmp_path / "m" / "sub").mkdir(parents=True)
    (tmp_path / "m" / "w.bin").write_bytes(W.tobytes())
    with pytest.raises(ModelError, match=r"'w'.*'\.\.'"):
        load_model(save(tmp_path / "m", make_model(location)))


def test_symlink_out_of_folder_is_refused(tmp_path):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(W.tobytes())
    folder = tmp_path / "m"
    folder.mkdir()
    os.symlink(secret, folder / "w.bin")
    os.symlink(tmp_path, folder / "up")  # a symlinked folder pointing out
    with pytest.raises(ModelError, match="'w'.*resolves outside"):
        load_model(save(folder, make_model("w.bin")))
    with pytest.raises(ModelError, match="'w'.*resolves outside"):
        load_model(save(folder, make_model("up/secret.bin")))


def test_location_naming_the_folder_itself_is_refused(tmp_path):
    with pytest.raises(ModelError, match="names no file"):
        load_model(save(tmp_path, make_model("./")))


def test_missing_file(tmp_path):
    with pytest.raises(ModelError, match="'w'.*'nope.bin' does not exist"):
        load_model(save(tmp_path, make_model("nope.bin")))


def test_not_a_regular_file(tmp_path):
    (tmp_path / "dir.bin").mkdir()
    with pytest.raises(ModelError, match="not a regular file"):
        load_model(save(tmp_path, make_model("dir.bin")))
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo.bin")  # must not block the import
        with pytest.raises(ModelError, match="not a regular file"):
            load_model(save(tmp_path, make_model("fifo.bin")))


@pytest.mark.parametrize("offset,length", [(100, None), (0, 49), (10, 40), (49, 0)])
def test_range_beyond_end_of_file(tmp_path, offset, length):
    (tmp_path / "w.bin").write_bytes(W.tobytes())  # 48 bytes
    with pytest.raises(ModelError, match="'w'.*beyond the end"):
        load_model(save(tmp_path, make_model("w.bin", offset, length)))


def test_length_not_matching_dims(tmp_path):
    (tmp_path / "w.bin").write_bytes(W.tobytes())
    with pytest.raises(ModelError, match="'w'.*40 bytes.*need 48"):
        load_model(save(tmp_path, make_model("w.bin", 8)))


@pytest.mark.parametrize("key,value", [("offset", "-4"), ("offset", "abc"), ("length", "1e3")])
def test_malformed_offset_or_length(tmp_path, key, value):
    (tmp_path / "w.bin").write_bytes(W.tobytes())
    m = make_model("w.bin")
    e = m.graph.initializer[0].external_data.add()
    e.key, e.value = key, value
    with pytest.raises(ModelError, match=f"'w'.*{key}"):
        load_model(save(tmp_path, m))


def test_no_location(tmp_path):
    m = make_model("w.bin")
    del m.graph.initializer[0].external_data[:]
    with pytest.raises(ModelError, match="no 'location'"):
        load_model(save(tmp_path, m))


def test_nothing_outside_is_opened(tmp_path, monkeypatch):
    """The refusals happen before any open(): record every os.open the importer makes."""
    secret = tmp_path / "secret.bin"
    secret.write_bytes(W.tobytes())
    folder = tmp_path / "m"
    folder.mkdir()
    os.symlink(secret, folder / "w.bin")
    opened: list[str] = []
    real_open = os.open

    def spy(path, *a, **kw):
        opened.append(os.fspath(path))
        return real_open(path, *a, **kw)

    model_path = save(folder, make_model("w.bin"))
    (folder / "good.bin").write_bytes(W.tobytes())
    monkeypatch.setattr(os, "open", spy)
    load_model(make_model("good.bin"), base_dir=folder)
    assert opened, "the spy sees the importer's opens"
    for loc in ("w.bin", "../secret.bin", str(secret)):
        with pytest.raises(ModelError):
            load_model(make_model(loc), base_dir=folder)
    with pytest.raises(ModelError):
        load_model(model_path)
    assert not any("secret" in p for p in opened), opened


@pytest.mark.parametrize("swap", ["symlink", "other-file"])
def test_file_swapped_after_the_check_is_refused(tmp_path, monkeypatch, swap):
    """A race: the checked file is replaced (by a symlink out, or another file) before open."""
    from onnxjit import external_data

    secret = tmp_path / "secret.bin"
    secret.write_bytes(W.tobytes())
    folder = tmp_path / "m"
    folder.mkdir()
    target = folder / "w.bin"
    target.write_bytes(W.tobytes())
    real_resolve = external_data.resolve

    def racy_resolve(*a, **kw):
        out = real_resolve(*a, **kw)
        target.rename(folder / "old.bin")  # keeps the old inode alive, so it is not reused
        if swap == "symlink":
            os.symlink(secret, target)
        else:
            target.write_bytes(W.tobytes())
        return out

    monkeypatch.setattr(external_data, "resolve", racy_resolve)
    with pytest.raises(ModelError, match="'w'.*(safely|changed)"):
        load_model(save(folder, make_model("w.bin")))


# ---------------------------------------------------------------------------------- hashing


def test_model_hash_covers_external_files(tmp_path):
    (tmp_path / "w.bin").write_bytes(W.tobytes())
    p = save(tmp_path, make_model("w.bin"))
    _, h1 = model_hash(p)
    assert model_hash(p)[1] == h1
    (tmp_path / "w.bin").write_bytes(W.tobytes() + b"more")
    _, h2 = model_hash(p)
    assert h2 != h1


# ------------------------------------------------- a model reached through a symlink (HF hub)


def hf_snapshot(tmp_path: Path, location: str = "model.onnx_data") -> Path:
    """The HuggingFace cache layout: snapshots/<rev>/model.onnx -> ../../blobs/<hash>, and the
    data file beside it a link into blobs/ too. Returns the snapshot folder."""
    repo = tmp_path / "hub" / "models--acme--net"
    blobs, snap = repo / "blobs", repo / "snapshots" / "rev1"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    (blobs / "aaaa").write_bytes(make_model(location).SerializeToString())
    (blobs / "bbbb").write_bytes(W.tobytes())
    os.symlink("../../blobs/aaaa", snap / "model.onnx")
    os.symlink("../../blobs/bbbb", snap / "model.onnx_data")
    return snap


def test_hf_snapshot_layout_loads(tmp_path):
    import onnxjit

    snap = hf_snapshot(tmp_path)
    np.testing.assert_array_equal(weights(load_model(snap / "model.onnx")), W)
    np.testing.assert_array_equal(weights(load_model(str(snap / "model.onnx"))), W)
    for cache in (False, tmp_path / "cache"):
        fn = onnxjit.compile(snap / "model.onnx", cache_dir=cache)
        np.testing.assert_array_equal(fn()[0], W)
    assert "invalid" not in repr(model_hash(snap / "model.onnx"))


def test_hf_snapshot_reached_by_a_relative_path(tmp_path, monkeypatch):
    snap = hf_snapshot(tmp_path)
    monkeypatch.chdir(snap.parent)
    np.testing.assert_array_equal(weights(load_model("rev1/model.onnx")), W)
    np.testing.assert_array_equal(weights(load_model(Path("rev1") / ".." / "rev1" /
                                                     "model.onnx")), W)


def test_hf_blobs_folder_counts_only_for_the_model_path(tmp_path):
    """Bytes with base_dir=snapshot have no model file: the blobs folder is not allowed."""
    snap = hf_snapshot(tmp_path)
    data = (snap / "model.onnx").read_bytes()
    with pytest.raises(ModelError, match="'w'.*resolves outside"):
        load_model(data, base_dir=snap)


@pytest.mark.parametrize("escape", ["link-to-outside", "link-to-dir-outside", "dotdot",
                                    "absolute", "dotdot-into-blobs"])
def test_hf_snapshot_escapes_are_refused(tmp_path, escape):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.bin").write_bytes(W.tobytes())
    location = {"link-to-outside": "evil.bin", "link-to-dir-outside": "up/secret.bin",
                "dotdot": "../../../outside/secret.bin",
                "absolute": str(outside / "secret.bin"),
                "dotdot-into-blobs": "../../blobs/bbbb"}[escape]
    snap = hf_snapshot(tmp_path, location)
    os.symlink(outside / "secret.bin", snap / "evil.bin")
    os.symlink(outside, snap / "up")
    with pytest.raises(ModelError, match="'w'.*(outside|absolute|'\\.\\.')"):
        load_model(snap / "model.onnx")
    model_hash(snap / "model.onnx")  # hashing leaves the refusal to the import: no error


def test_model_symlink_target_folder_is_the_only_second_folder(tmp_path):
    """A model link into a folder allows that folder, not its parent or a sibling."""
    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "sibling").mkdir()
    (tmp_path / "sibling" / "w.bin").write_bytes(W.tobytes())
    (tmp_path / "real" / "sub" / "w.bin").write_bytes(W.tobytes())
    save(tmp_path / "real", make_model("w.bin"))
    snap = tmp_path / "snap"
    snap.mkdir()
    os.symlink(tmp_path / "real" / "model.onnx", snap / "model.onnx")
    os.symlink(tmp_path / "sibling" / "w.bin", snap / "w.bin")
    with pytest.raises(ModelError, match="'w'.*resolves outside"):
        load_model(snap / "model.onnx")
    os.remove(snap / "w.bin")
    os.symlink(tmp_path / "real" / "sub" / "w.bin", snap / "w.bin")
    np.testing.assert_array_equal(weights(load_model(snap / "model.onnx")), W)


def test_hard_link_to_a_file_outside_is_refused(tmp_path):
    outside = tmp_path / "secret.bin"
    outside.write_bytes(W.tobytes())
    folder = tmp_path / "m"
    folder.mkdir()
    os.link(outside, folder / "w.bin")
    with pytest.raises(ModelError, match="'w'.*hard link"):
        load_model(save(folder, make_model("w.bin")))
