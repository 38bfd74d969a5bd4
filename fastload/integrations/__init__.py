"""fastload inside the training frameworks that take a loader and build another from it.

* PyTorch Lightning needs nothing here: a ``fastload.DataLoader`` survives Lightning's
  re-creation (it holds only what it was given; see :mod:`fastload.loader.core`).
* Hugging Face Accelerate's ``prepare`` always builds torch's own ``DataLoader`` from a
  loader's dataset and batch sampler, which drops what fastload runs: prepare fastload loaders
  with :func:`fastload.integrations.hf_accelerate.prepare` instead.
* OpenCLIP's trainer, timm's ``train.py`` and transformers' ``Trainer`` build their own
  loaders: ``python -m fastload.integrations.open_clip``, ``python -m
  fastload.integrations.timm train.py`` and ``python -m fastload.integrations.transformers
  script.py`` run them unchanged with fastload's.
"""
