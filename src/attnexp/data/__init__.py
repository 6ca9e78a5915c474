"""LightningDataModules (one per dataset) and the loading, source and batching code they share."""
