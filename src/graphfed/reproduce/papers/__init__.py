"""One module per paper, each registering that paper's presets (``preset.register``) and the
metrics its tables report (``score.register_metrics``).

A new paper's presets are a new module here: ``catalog.load_presets`` finds it by name, with no
list to edit."""
