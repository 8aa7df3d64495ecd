"""Target features for drafter training: the target's tapped hidden states, extracted once into a cache
(``data features``) and read back by row."""
