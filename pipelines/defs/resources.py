"""The one resource every asset and op uses: where the specs and the state live."""


from pathlib import Path

import dagster as dg

from pipelines.night import Night, NightSettings, default_home


class NightlyResource(dg.ConfigurableResource):
    """Points at ``assets/`` and the state folder; empty fields take the embedded defaults.

    Relative paths (``NIGHTLY_HOME=relhome dagster asset materialize ...``) are resolved here, against
    the working folder Dagster was started in, as ``nightly run`` resolves them: every Dagster way in
    (assets, sensors, schedules) reads its settings through :meth:`settings`, and the tests and
    converters run in the framework's checkout, where a relative cache path would point elsewhere.
    """

    home: str = ""
    assets_dir: str = ""
    repo: str = ""
    deployment: str = ""

    def settings(self, **overrides) -> NightSettings:
        """The night's settings; ``overrides`` win (a calibration names its source run's repo)."""
        return NightSettings(**{
            "home": Path(self.home).resolve() if self.home else default_home(),
            "assets_dir": Path(self.assets_dir).resolve() if self.assets_dir else None,
            "repo": self.repo or None,
            "deployment": self.deployment or None,
            **overrides,
        })

    def night(self, run_id: str | None = None, **overrides) -> Night:
        return Night(self.settings(**overrides), run_id=run_id)
