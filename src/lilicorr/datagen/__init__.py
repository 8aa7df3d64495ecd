"""Data generation: the training rows a drafter learns from — prompts answered by the target itself
(``data regenerate``, its answer engines and data card), merged, and packed into answer packs."""
