"""Checkpoints and models: create, load, convert between Hugging Face and TorchTitan.

    checkpoint.py  Hugging Face checkpoint directories (Checkpoint, save_checkpoint)
    shape.py       a config.json's network shape (no torch, no TorchTitan)
    titan.py       the TorchTitan model and its state-dict adapter
    lora.py        LoRA adapters on the TorchTitan model, and their PEFT names
    peft.py        LoRA adapter directories in PEFT's layout (no TorchTitan)
    tiny.py        a tiny random checkpoint, created locally
    tokenizer.py   the tiny model's tokenizers: digits, or bytes for any text

Import from the module itself: TorchTitan is heavy to import, and processes that
only read checkpoints (generators, the controller) should not pay for it.
"""
