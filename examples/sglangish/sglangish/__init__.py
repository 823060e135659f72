"""A tiny serving engine in the style of the SGLang family, small enough to test on CPU."""
