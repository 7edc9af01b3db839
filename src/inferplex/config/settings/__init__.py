"""ServerConfig's sections: one module per group of settings, each a pydantic model whose
fields and validators ServerConfig (config/server_config.py) inherits."""
