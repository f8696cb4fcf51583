import io
import os

import matplotlib.pyplot as plt

from embnorm_lib.core.records.io import same_pdf_drawing, write_figure_if_changed


def _pdf(last_y: float) -> bytes:
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0.0, 1.0, 2.0], [0.0, 0.3, last_y])
    ax.set(xlim=(0, 2), ylim=(0, 1))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="pdf", metadata={"CreationDate": None, "Producer": None, "Creator": None})
    plt.close(fig)
    return buffer.getvalue()


def test_a_pdf_whose_coordinates_moved_in_the_last_decimal_keeps_its_bytes(tmp_path):
    committed, other_cpu, redrawn = _pdf(0.5), _pdf(0.5 + 3e-7), _pdf(0.6)
    assert committed != other_cpu  # the premise: the move reaches the file's sixth decimal
    assert same_pdf_drawing(committed, other_cpu)
    assert not same_pdf_drawing(committed, redrawn)

    path = tmp_path / "figure.pdf"
    path.write_bytes(committed)
    os.utime(path, (1, 1))
    write_figure_if_changed(path, other_cpu)
    assert path.read_bytes() == committed and path.stat().st_mtime == 1  # not rewritten
    write_figure_if_changed(path, redrawn)
    assert path.read_bytes() == redrawn


def test_other_formats_compare_bytes(tmp_path):
    path = tmp_path / "figure.png"
    path.write_bytes(b"old")
    write_figure_if_changed(path, b"new")
    assert path.read_bytes() == b"new"
    fresh = write_figure_if_changed(tmp_path / "new.pdf", _pdf(0.5))
    assert fresh.read_bytes() == _pdf(0.5)
