"""CIFAR files are unpickled without running code, with or without the md5 check: a pickle that
names any callable outside numpy's array types is refused before that callable runs, while the
official format (protocol 2, bytes keys, numpy arrays) and re-pickled copies still load."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from helpers.paths import SHARED_DATA

from visattn.data import cifar
from visattn.data.cifar import DatasetIntegrityError, load_cifar


class _Payload:
    """Unpickles by calling ``exec`` on a line that leaves a marker file: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


def _write_cifar10(folder: Path, protocol: int = 2, payload_in: str | None = None) -> Path:
    """A 4-image-per-file CIFAR-10 folder; ``payload_in`` names the file that carries the
    payload (in place of its data or class names). Returns the marker the payload would write."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    marker = folder.parent / "payload-ran"
    spec = cifar.CIFAR_SPECS["cifar10"]
    for fname, _ in (*spec["train"], *spec["test"]):
        data = rng.integers(0, 256, (4, 3072), dtype=np.uint8)
        entry = {
            b"data": _Payload(marker) if fname == payload_in else data,
            b"labels": [int(v) for v in rng.integers(0, 10, 4)],
            b"batch_label": b"tiny",
        }
        (folder / fname).write_bytes(pickle.dumps(entry, protocol=protocol))
    meta_name, _, meta_key = spec["meta"]
    names = [f"class{i}".encode() for i in range(10)]
    meta = {meta_key.encode(): _Payload(marker) if meta_name == payload_in else names}
    (folder / meta_name).write_bytes(pickle.dumps(meta, protocol=protocol))
    return marker


@pytest.mark.parametrize("carrier", ["data_batch_3", "batches.meta"])
def test_malicious_pickle_is_refused_even_with_verify_off(tmp_path: Path, carrier: str) -> None:
    marker = _write_cifar10(tmp_path / "cifar-10-batches-py", payload_in=carrier)
    with pytest.raises(pickle.UnpicklingError) as err:
        load_cifar("cifar10", tmp_path, train=True, verify=False)
    assert not marker.exists(), "the payload ran while the CIFAR file was read"
    msg = str(err.value)
    assert str(tmp_path / "cifar-10-batches-py" / carrier) in msg
    assert ".exec" in msg and "--data.download true" in msg  # (protocol 2 says __builtin__)
    # one exception type covers a refused file, checked or not
    assert isinstance(err.value, DatasetIntegrityError)


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_repickled_copies_still_load_with_verify_off(tmp_path: Path, protocol: int) -> None:
    """Python 3 / numpy 2 re-pickles name ``_codecs.encode``, ``numpy._core`` and, from protocol
    5, ``_frombuffer``: all allowed, and the pixels come back unchanged."""
    folder = tmp_path / "cifar-10-batches-py"
    _write_cifar10(folder, protocol=protocol)
    images, labels, classes = load_cifar("cifar10", tmp_path, train=False, verify=False)
    with open(folder / "test_batch", "rb") as f:
        raw = pickle.load(f)  # our own file: the trusted reference decoder
    expected = raw[b"data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(images, expected)
    assert labels.tolist() == raw[b"labels"] and classes[3] == "class3"


@pytest.mark.data
def test_the_real_cifar10_copy_still_loads() -> None:
    images, labels, classes = load_cifar("cifar10", SHARED_DATA, train=False, verify=False)
    assert images.shape == (10000, 32, 32, 3) and images.dtype == np.uint8
    assert np.bincount(labels).tolist() == [1000] * 10 and classes[0] == "airplane"
    train, train_labels, _ = load_cifar("cifar10", SHARED_DATA, train=True, verify=False)
    assert train.shape == (50000, 32, 32, 3) and len(train_labels) == 50000
