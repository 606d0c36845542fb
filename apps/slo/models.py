"""SLO contracts (versioned per tenant and tier), request records and materialised fulfilment.

``SLOContract`` holds the terms in force and is what the admin edits; every change of terms
snapshots them into an immutable ``ContractVersion``, and each request record points at the
version that was in force when it arrived. Logic lives in ``services.py`` / ``selectors.py``.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from apps.core.tiers import CHOICES
from apps.tenants.models import ApiKey, Tenant
from inference.request import ContractTargets

# The design's table of targets: the engine's defaults are a new contract's.
_TABLE = ContractTargets()


class Window(models.TextChoices):
    MINUTE = "minute", "Minute"
    HOUR = "hour", "Hour"
    DAY = "day", "Day"


class Outcome(models.TextChoices):
    OK = "ok"
    INTERRUPTED = "interrupted"
    REJECTED_429 = "rejected_429"
    REJECTED_503 = "rejected_503"
    REJECTED_400 = "rejected_400"
    ERROR = "error"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


class ContractTerms(models.Model):
    """The terms of a contract, shared by the live contract and its frozen versions.

    Times are seconds, rates tokens/s, budgets and bands fractions (0.001 = 0.1 %), the cold
    percentile a percentage. Defaults are the design's table (``ContractTargets``), the one
place they are written; the limits are the platform's own.
    """

    # hot
    ttft_p99_s = models.FloatField("P99 TTFT (s)", default=_TABLE.ttft_p99_s)
    tbt_p99_s = models.FloatField("P99 TBT (s)", default=_TABLE.tbt_p99_s)
    interruption_budget = models.FloatField(
        "interruption budget", default=_TABLE.interruption_budget,
        help_text="Fraction of started streams, 0.001 = 0.1 %.",
    )
    demotable = models.BooleanField(
        default=_TABLE.demotable, help_text="Sessions may be moved to warm under hot pressure."
    )
    demotion_budget = models.FloatField(
        default=0.05, help_text="With demotable sessions: the largest share of requests demoted."
    )
    priority_weight = models.FloatField(default=_TABLE.priority_weight)
    # warm
    warm_rate_tps = models.FloatField("contracted tokens/s", default=_TABLE.warm_rate_tps)
    warm_band = models.FloatField("stability band", default=_TABLE.warm_band,
                                  help_text="0.05 = ±5 %.")
    warm_mean_ttft_s = models.FloatField("mean TTFT (s)", default=_TABLE.warm_mean_ttft_s)
    # cold
    cold_deadline_s = models.FloatField("deadline (s)", default=_TABLE.cold_deadline_s)
    cold_percentile = models.FloatField(
        "completion percentile", default=_TABLE.cold_percentile,
        help_text="% of jobs that finish by the deadline.",
    )
    # limits, every tier
    requests_per_min = models.PositiveIntegerField(default=600)
    tokens_per_min = models.PositiveIntegerField(default=200_000)
    daily_token_budget = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Tokens in + out per UTC day; empty = unlimited."
    )

    class Meta:
        abstract = True

    TERM_FIELDS = (
        "ttft_p99_s", "tbt_p99_s", "interruption_budget", "demotable", "demotion_budget",
        "priority_weight", "warm_rate_tps", "warm_band", "warm_mean_ttft_s", "cold_deadline_s",
        "cold_percentile", "requests_per_min", "tokens_per_min", "daily_token_budget",
    )

    def terms(self) -> dict:
        return {name: getattr(self, name) for name in self.TERM_FIELDS}

    @classmethod
    def defaults(cls) -> dict:
        """Every term's default (a new contract's terms before its plan's overrides)."""
        return {f.name: f.get_default() for f in cls._meta.fields if f.name in cls.TERM_FIELDS}


class SLOContract(ContractTerms):
    """What one tier owes one tenant. A tenant may use exactly the tiers it has a contract for."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="slo_contracts")
    tier = models.CharField(max_length=8, choices=CHOICES)
    current_version = models.ForeignKey(
        "ContractVersion", on_delete=models.PROTECT, null=True, blank=True, editable=False,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant__name", "tier"]
        verbose_name = "SLO contract"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "tier"], name="slo_one_contract_per_tier")
        ]

    def __str__(self) -> str:
        return f"{self.tenant} · {self.tier}"

    # Set (never stored) by the admin for platform staff, who may sign beyond the plan.
    sign_beyond_plan = False

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        from apps.slo.validation import validate_contract

        signed = self.current_version.terms() if self.current_version_id else None
        errors = validate_contract(self.terms(), tenant_id=self.tenant_id, tier=self.tier,
                                   beyond_plan=self.sign_beyond_plan, signed=signed)
        if errors:
            raise ValidationError(errors)


class ContractVersion(ContractTerms):
    """An immutable snapshot of a contract's terms; request records point here."""

    contract = models.ForeignKey(SLOContract, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["contract", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["contract", "number"], name="slo_version_number")
        ]

    def __str__(self) -> str:
        return f"{self.contract} v{self.number}"


class RequestRecord(models.Model):
    """One finished request, whatever its outcome (written in batches by ``reporting``)."""

    request_id = models.CharField(max_length=128, db_index=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    api_key = models.ForeignKey(
        ApiKey, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # The signed-in user a request ran as (web chat, a batch started in the web app); no key.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
        related_name="+"
    )
    contract_version = models.ForeignKey(
        ContractVersion, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    tier_asked = models.CharField(max_length=8, choices=CHOICES)
    tier_served = models.CharField(max_length=8, choices=CHOICES, blank=True)
    demoted = models.BooleanField(default=False)
    # False: admitted as excess, above the contract's rates (under the plan's burst ceiling)
    in_contract = models.BooleanField(default=True)
    endpoint = models.CharField(max_length=64, blank=True)
    streamed = models.BooleanField(default=False)
    # the grammar its output was held to: json_object, json_schema, tool_calls ("" = free)
    constraint = models.CharField(max_length=16, blank=True, default="")
    arrival = models.DateTimeField()
    first_token_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField()
    deadline = models.DateTimeField(null=True, blank=True)
    ttft_s = models.FloatField(null=True, blank=True)
    queue_s = models.FloatField(null=True, blank=True)
    tbt_p50_s = models.FloatField(null=True, blank=True)
    tbt_p99_s = models.FloatField(null=True, blank=True)
    tbt_max_s = models.FloatField(null=True, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    replica = models.CharField(max_length=64, blank=True)
    batch_id = models.CharField(max_length=64, null=True, blank=True)
    error_code = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-finished_at"]
        indexes = [
            models.Index(
                fields=["tenant", "tier_asked", "finished_at"], name="slo_rec_tenant_tier"
            ),
            models.Index(fields=["finished_at"], name="slo_rec_finished"),
        ]

    def __str__(self) -> str:
        return f"{self.request_id} ({self.outcome})"


class BatchRecord(models.Model):
    """A cold job's outcome as the batches app reports it (one row per batch, upserted)."""

    batch_id = models.CharField(max_length=64, unique=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    contract_version = models.ForeignKey(
        ContractVersion, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField()
    deadline = models.DateTimeField(db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=32)
    total = models.PositiveIntegerField(default=0)
    completed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-deadline"]

    @property
    def on_time(self) -> bool:
        return (self.finished_at is not None and self.finished_at <= self.deadline
                and self.failed == 0 and self.completed >= self.total)


class WindowAggregate(models.Model):
    """Fulfilment of one tenant × tier × window, materialised once the window has closed.

    ``stats`` holds the measured values, ``terms`` maps each contract term to
    ``{"target", "actual", "kept"}`` (see docs/slo.md for the accounting).
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    tier = models.CharField(max_length=8, choices=CHOICES)
    window = models.CharField(max_length=8, choices=Window.choices)
    start = models.DateTimeField()
    contract_version = models.ForeignKey(
        ContractVersion, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    stats = models.JSONField(default=dict)
    terms = models.JSONField(default=dict)
    computed_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant", "tier", "window", "start"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "tier", "window", "start"], name="slo_one_aggregate_per_window"
            )
        ]


class UsageDaily(models.Model):
    """Tokens and requests per API key, tier and UTC day (kept after raw records are pruned)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    api_key = models.ForeignKey(
        ApiKey, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    key_prefix = models.CharField(max_length=16, blank=True)
    tier = models.CharField(max_length=8, choices=CHOICES)
    day = models.DateField()
    requests = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["-day", "tier", "key_prefix"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "key_prefix", "tier", "day"], name="slo_one_usage_row"
            )
        ]


class AlertSettings(models.Model):
    """Where a tenant's breach alerts go. Without a row, alerts are emailed to tenant admins."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="slo_alerts")
    enabled = models.BooleanField(default=True)
    webhook_url = models.URLField(blank=True, help_text="POSTed a JSON body per breach.")
    emails = models.TextField(
        blank=True, help_text="Comma-separated; empty = the tenant's admins' addresses."
    )

    class Meta:
        verbose_name = "alert settings"
        verbose_name_plural = "alert settings"


class BreachAlert(models.Model):
    """A term missed over a window. The unique constraint makes each alert fire at most once."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    tier = models.CharField(max_length=8, choices=CHOICES)
    window = models.CharField(max_length=8, choices=Window.choices)
    window_start = models.DateTimeField()
    term = models.CharField(max_length=32)
    target = models.FloatField(null=True)
    actual = models.FloatField(null=True)
    created_at = models.DateTimeField(auto_now_add=True)
    webhook_status = models.CharField(max_length=64, blank=True)
    emailed = models.BooleanField(default=False)

    class Meta:
        ordering = ["-window_start"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "tier", "window", "window_start", "term"],
                name="slo_alert_once_per_term_window",
            )
        ]


class AggregationMark(models.Model):
    """How far each window kind has been materialised: windows ending by ``through`` are final."""

    window = models.CharField(max_length=8, choices=Window.choices, unique=True)
    through = models.DateTimeField()
