"""The smallest Django settings for the recipe: no database, one app."""

SECRET_KEY = "recipe-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
INSTALLED_APPS = ["shop"]
ROOT_URLCONF = "shop.urls"
DATABASES: dict[str, object] = {}
USE_TZ = True
