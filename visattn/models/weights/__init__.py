"""Released weights as data: the tag table (``tags.toml``: one ``[[tag]]`` row per released file,
the fields of :class:`visattn.models.pretrained.PretrainedTag`) and the converters of the files'
key layouts, one module per source family (:mod:`visattn.models.weights.converters`).
:mod:`visattn.models.pretrained` reads both; ``python -m visattn weights`` and the weights guide
show the same table."""
