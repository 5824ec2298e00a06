"""Examples of measuring your own model with the harness (README, "Your own training")."""
