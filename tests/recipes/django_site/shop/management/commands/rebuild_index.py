import pathlib

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Rebuild the search index (run it under tenure run: one at a time everywhere)."

    def handle(self, *args: object, **options: object) -> None:
        # The recipe test counts runs in this file.
        with pathlib.Path("rebuild_index.log").open("a") as log:
            log.write("ran\n")
