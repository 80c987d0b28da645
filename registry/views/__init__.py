"""Dashboard pages of the registry: the catalog (models, versions) and the factory's builds."""
