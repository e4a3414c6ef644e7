"""torch.hub entrypoints: ``torch.hub.load("<owner>/visattn", "se_resnet50", pretrained=True)``.

Every model of ``visattn.list_models()`` is an entrypoint. ``pretrained=True`` loads the model's
first released tag (``visattn.list_pretrained()``), or the one named by ``tag=``, through
visattn's tag path (``visattn.create_model("<model>.<tag>", pretrained=True)``: the tag's eval
transform, its converter and the strict check); ``file=`` loads a local copy of the released
file instead of downloading it.
"""

dependencies = ["torch", "timm"]


def _entrypoint(name: str):
    def load(pretrained: bool = False, tag: str | None = None, file: str | None = None, **kwargs):
        import visattn

        if not pretrained:
            return visattn.create_model(name, **kwargs)
        tags = [t.tag for t in visattn.list_pretrained(f"{name}.*")]
        if not tags:
            raise ValueError(f"{name!r} has no released weights (see visattn.list_pretrained())")
        chosen = tag or tags[0]
        if chosen not in tags:
            raise ValueError(f"{name!r} has no tag {chosen!r}; it has {', '.join(tags)}")
        if file is not None:
            kwargs["pretrained_cfg_overlay"] = {"file": file}
        return visattn.create_model(f"{name}.{chosen}", pretrained=True, **kwargs)

    load.__name__ = name
    load.__doc__ = f"visattn model {name!r}; pretrained=True loads its released weights."
    return load


def _register() -> None:
    import visattn

    for name in visattn.list_models():
        globals()[name] = _entrypoint(name)


_register()
