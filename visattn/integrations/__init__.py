"""Optional integrations with other libraries; nothing here is imported by :mod:`visattn`.

* :mod:`visattn.integrations.yolo`: visattn blocks as a module of Ultralytics YOLO model files
  (``[-1, 1, VisAttn, [cbam]]``), needs the ``yolo`` extra (ultralytics, AGPL-3.0). Ultralytics
  is imported only when :func:`visattn.integrations.yolo.register` runs.
* :mod:`visattn.integrations.smp`: visattn ResNets as segmentation-models-pytorch encoders
  (``tu-visattn_<name>``), with a check that names why a model cannot be one.

This package's ``__init__`` imports none of them, so importing it needs no optional dependency.
"""

__all__: list[str] = []
