"""The API docs page at `/schema`, from Swagger UI files installed with Jev rather than from a CDN.

litestar's render plugins load their JavaScript and CSS from CDNs by default, so the page was
blank on a machine without internet access. The `swagger-ui-bundle-v2` package (a dependency of
the `serve` extra) ships the Swagger UI distribution as package data; its files are served under
`/schema/assets`, open like the page at `/`, and the render plugin points there.
"""

from pathlib import Path

from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.router import Router
from litestar.static_files import create_static_files_router
from swagger_ui_bundle import swagger_ui_path

DOCS_PATH = "/schema"
ASSETS_PATH = f"{DOCS_PATH}/assets"


def docs_config(title: str, version: str) -> OpenAPIConfig:
    """OpenAPI at `/schema/openapi.json`, rendered by Swagger UI at `/schema` from the local assets."""
    swagger = SwaggerRenderPlugin(
        js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
        css_url=f"{ASSETS_PATH}/swagger-ui.css",
        standalone_preset_js_url=f"{ASSETS_PATH}/swagger-ui-standalone-preset.js",
        favicon=f"<link rel='icon' type='image/png' href='{ASSETS_PATH}/favicon-32x32.png'>",
    )
    return OpenAPIConfig(title=title, version=version, path=DOCS_PATH, render_plugins=[swagger])


def docs_assets() -> Router:
    """The Swagger UI files, public like the page at `/` (the page asks for an API key itself)."""
    return create_static_files_router(
        ASSETS_PATH, [Path(str(swagger_ui_path))], opt={"public": True}, include_in_schema=False
    )
