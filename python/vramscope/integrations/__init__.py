"""Training callbacks that stop a leaking run before it runs out of memory: `hf.VramscopeCallback`
(transformers' Trainer) and `lightning.VramscopeCallback`. Each imports its framework only when
imported itself; neither framework is a dependency of vramscope."""
