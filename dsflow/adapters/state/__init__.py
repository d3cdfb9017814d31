"""State backends: read, write and lock the deployed state."""
