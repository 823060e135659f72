"""minirl: a tiny RL training framework whose GPU end-to-end tests really run on CPU.

It exists so the nightly pipeline has a real framework to catalog, prepare, launch and
calibrate: the tests download a model and a dataset from a local hub folder, convert the
model into a sharded "torch_dist"-like checkpoint and train it with numpy for a few seconds.
"""

__version__ = "0.1.0"
