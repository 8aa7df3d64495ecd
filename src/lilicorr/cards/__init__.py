"""Model cards (``MODEL_CARD.md``) written from measured figures: trained drafters, trained targets, imported
targets."""
