"""The Jinja2 templates of the model cards the training scripts write (``*.md.j2``): package data of
``diffusers_infonoise.model_cards`` in an installed package (pyproject maps this folder there)."""
