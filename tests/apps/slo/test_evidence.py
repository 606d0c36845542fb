"""The evidence is read-only for tenant admins: request records, usage, breach alerts, contract
versions (and contracts, edited only by a new version) answer 403 to every admin URL and bulk
action that would edit or delete them; only platform staff delete, and the admin logs it."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.admin.models import DELETION, LogEntry
from django.test import Client
from django.utils import timezone

from apps.slo.models import BreachAlert, ContractVersion, RequestRecord, SLOContract, UsageDaily

pytestmark = pytest.mark.django_db
ADMIN = "/admin/slo"


@pytest.fixture
def evidence(tenant_factory, user_factory):
    tenant = tenant_factory(default_contracts=True)
    now = timezone.now()
    rows = {
        "requestrecord": RequestRecord.objects.create(
            request_id="req-1", tenant=tenant, tier_asked="hot", arrival=now, finished_at=now,
            outcome="ok", prompt_tokens=10, completion_tokens=20),
        "usagedaily": UsageDaily.objects.create(tenant=tenant, tier="hot", day=now.date(),
                                                requests=14, prompt_tokens=2000),
        "breachalert": BreachAlert.objects.create(
            tenant=tenant, tier="hot", window="hour", window_start=now - dt.timedelta(hours=1),
            term="ttft_p99", target=0.2, actual=0.9),
        "slocontract": SLOContract.objects.get(tenant=tenant, tier="hot"),
    }
    rows["contractversion"] = rows["slocontract"].current_version
    admin_client, staff_client = Client(), Client()
    admin_client.force_login(user_factory(tenant=tenant, role="admin", is_staff=True))
    staff = user_factory(is_staff=True, is_superuser=True)
    staff_client.force_login(staff)
    return {"rows": rows, "admin": admin_client, "staff": staff_client, "staff_user": staff}


MODELS = ["requestrecord", "usagedaily", "breachalert", "contractversion", "slocontract"]
COUNTS = {"requestrecord": RequestRecord, "usagedaily": UsageDaily, "breachalert": BreachAlert,
          "contractversion": ContractVersion, "slocontract": SLOContract}


@pytest.mark.parametrize("model", MODELS)
def test_tenant_admin_reads_but_gets_403_on_delete_and_bulk_delete(evidence, model):
    client, obj = evidence["admin"], evidence["rows"][model]
    before = COUNTS[model].objects.count()
    assert client.get(f"{ADMIN}/{model}/").status_code == 200
    assert client.get(f"{ADMIN}/{model}/{obj.pk}/change/").status_code == 200  # view only
    assert client.get(f"{ADMIN}/{model}/{obj.pk}/delete/").status_code == 403
    assert client.post(f"{ADMIN}/{model}/{obj.pk}/delete/", {"post": "yes"}).status_code == 403
    bulk = client.post(f"{ADMIN}/{model}/", {"action": "delete_selected", "post": "yes",
                                             "_selected_action": [obj.pk]})
    assert bulk.status_code == 403
    assert COUNTS[model].objects.count() == before


@pytest.mark.parametrize("model", ["requestrecord", "usagedaily", "breachalert",
                                   "contractversion"])
def test_tenant_admin_gets_403_on_edit_and_add(evidence, model):
    client, obj = evidence["admin"], evidence["rows"][model]
    response = client.post(f"{ADMIN}/{model}/{obj.pk}/change/", {"request_id": "forged",
                                                                 "requests": 1, "term": "x"})
    assert response.status_code == 403
    assert client.get(f"{ADMIN}/{model}/add/").status_code == 403
    # Staff cannot edit evidence either: it is what was measured.
    staff = evidence["staff"].post(f"{ADMIN}/{model}/{obj.pk}/change/", {"requests": 1})
    assert staff.status_code == 403


# A contract is not in this list: its version in force protects it (on_delete=PROTECT), so no
# one deletes a contract through the admin.
@pytest.mark.parametrize("model", ["requestrecord", "usagedaily", "breachalert",
                                   "contractversion"])
def test_staff_deletions_leave_an_admin_log_entry(evidence, model):
    obj = evidence["rows"][model]
    if model == "contractversion":  # the contract points at it (PROTECT): delete an old one
        contract = evidence["rows"]["slocontract"]
        contract.ttft_p99_s = 0.3
        from apps.slo.services import contract_save

        contract_save(contract=contract)
        obj = contract.versions.get(number=1)
    response = evidence["staff"].post(f"{ADMIN}/{model}/", {
        "action": "delete_selected", "post": "yes", "_selected_action": [obj.pk]})
    assert response.status_code == 302
    assert not COUNTS[model].objects.filter(pk=obj.pk).exists()
    entry = LogEntry.objects.get(action_flag=DELETION, object_id=str(obj.pk),
                                 content_type__model=model)
    assert entry.user == evidence["staff_user"]


def test_the_api_has_no_way_to_delete_or_edit_evidence(evidence, api_key_factory):
    tenant = evidence["rows"]["requestrecord"].tenant
    _, raw = api_key_factory(tenant=tenant)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    for url in ("/api/slo/usage", "/api/slo/fulfilment", "/api/slo/contracts",
                "/api/slo/contracts/hot"):
        assert Client().delete(url, **auth).status_code in (403, 405)
        assert evidence["admin"].delete(url).status_code in (403, 405)
    assert Client().patch("/api/slo/usage", {}, content_type="application/json",
                          **auth).status_code == 405
    assert RequestRecord.objects.count() == 1 and SLOContract.objects.count() == 3


def test_a_record_shows_the_user_it_ran_as_read_only(evidence, user_factory):
    record = evidence["rows"]["requestrecord"]
    record.user = user_factory(username="chatting-member", tenant=record.tenant)
    record.save()
    client = evidence["admin"]
    assert "chatting-member" in client.get(f"{ADMIN}/requestrecord/").content.decode()
    page = client.get(f"{ADMIN}/requestrecord/{record.pk}/change/").content.decode()
    assert "chatting-member" in page and 'name="user"' not in page  # shown, not a form field
