"""``check_and_update_config`` in one module per phase; ``steps`` runs them in order."""
