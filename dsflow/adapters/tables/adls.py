"""Azure Data Lake Storage (an `adls` store, and an `iceberg` store whose warehouse is abfss://): where tables live
and how the libraries reach them.

A table is at abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH (the store's root and the table's 'delta.path'),
or az://CONTAINER/PATH (the store's account). delta-rs reads and writes it through its own Azure object store (the
Blob API, also for abfss:// URLs), pyiceberg through its fsspec FileIO (adlfs); listing, dropping and the
reachability check at apply use azure-storage-blob. Credentials are one of the store's `account_key`, `sas_token`
or service principal (`client_id`, `client_secret`, `tenant_id`); `endpoint` is the account's Blob service URL
when it is not https://ACCOUNT.blob.core.windows.net (Azurite: http://127.0.0.1:10000/devstoreaccount1).
"""

from __future__ import annotations

from typing import Any

from dsflow.errors import DsflowError
from dsflow.adapters.tables.lakepaths import AZURE_SCHEMES, scheme_of, split_azure_url


def is_azure(location: str) -> bool:
    return scheme_of(location) in AZURE_SCHEMES


def account_of(location: str, settings: dict[str, str]) -> str:
    parts = split_azure_url(location)
    return (parts[1] if parts and parts[1] else None) or settings.get("account", "")


def container_and_path(location: str) -> tuple[str, str]:
    parts = split_azure_url(location)
    if parts is None:
        raise DsflowError("DSF-E250", f"'{location}' is not an Azure Data Lake Storage URL",
                          hint="abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH or az://CONTAINER/PATH")
    return parts[0], parts[2]


def blob_url(settings: dict[str, str], account: str) -> str:
    """The account's Blob service URL: the store's endpoint, or Azure's."""
    return (settings.get("endpoint") or f"https://{account}.blob.core.windows.net").rstrip("/")


def storage_options(location: str, settings: dict[str, str]) -> dict[str, str]:
    """delta-rs (object_store) options for a table at `location` from the store's settings."""
    account = account_of(location, settings)
    options = {"account_name": account}
    if settings.get("endpoint"):
        options["endpoint"] = blob_url(settings, account)
        if options["endpoint"].startswith("http://"):
            options["allow_http"] = "true"
    for key, option in (("account_key", "account_key"), ("sas_token", "sas_token"), ("client_id", "client_id"),
                        ("client_secret", "client_secret"), ("tenant_id", "tenant_id")):
        if settings.get(key):
            options[option] = settings[key].lstrip("?") if key == "sas_token" else settings[key]
    return options


def fsspec_properties(settings: dict[str, str], account: str) -> dict[str, str]:
    """pyiceberg's adls.* FileIO properties (adlfs); an endpoint becomes a connection string, as Azurite needs."""
    if settings.get("endpoint"):
        secret = f"AccountKey={settings['account_key']}" if settings.get("account_key") \
            else f"SharedAccessSignature={settings.get('sas_token', '').lstrip('?')}"
        scheme = "http" if settings["endpoint"].startswith("http://") else "https"
        return {"adls.connection-string": f"DefaultEndpointsProtocol={scheme};AccountName={account};{secret};"
                                          f"BlobEndpoint={blob_url(settings, account)};"}
    keys = {"account_key": "adls.account-key", "sas_token": "adls.sas-token", "client_id": "adls.client-id",
            "client_secret": "adls.client-secret", "tenant_id": "adls.tenant-id"}
    return {"adls.account-name": account} | {option: settings[key] for key, option in keys.items() if settings.get(key)}


def service(settings: dict[str, str], account: str, retries: int = 3):
    """An azure-storage-blob client of the account (`retries`: 0 for a check that fails at once)."""
    from azure.storage.blob import BlobServiceClient

    credential: Any
    if settings.get("account_key"):
        credential = {"account_name": account, "account_key": settings["account_key"]}
    elif settings.get("sas_token"):
        credential = settings["sas_token"].lstrip("?")
    else:
        from azure.identity import ClientSecretCredential

        credential = ClientSecretCredential(settings["tenant_id"], settings["client_id"], settings["client_secret"])
    return BlobServiceClient(account_url=blob_url(settings, account), credential=credential, retry_total=retries,
                             retry_connect=retries, retry_read=retries, retry_status=retries, connection_timeout=10,
                             read_timeout=30)


def check_reachable(store: str, location: str, settings: dict[str, str]) -> None:
    """DSF-E393 naming the store when its container cannot be reached: endpoint down, wrong account or
    credentials, container missing (dsflow creates tables, never containers)."""
    from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ResourceNotFoundError

    account = account_of(location, settings)
    container, _ = container_and_path(location)
    where = f"container '{container}' of storage account '{account}' at {blob_url(settings, account)}"
    try:
        service(settings, account, retries=0).get_container_client(container).get_container_properties()
        return
    except ResourceNotFoundError as err:
        why, hint = "the container does not exist", f"create the container '{container}' (dsflow creates tables only)"
        cause: Exception = err
    except (ClientAuthenticationError, HttpResponseError) as err:
        refused = isinstance(err, ClientAuthenticationError) or err.status_code in (401, 403)
        why = "the credentials were refused" if refused else f"HTTP {err.status_code}"
        hint = "check the store's account and its account_key / sas_token / service principal (and that they are " \
               "for this account)" if refused else "check the store's account, container and credentials"
        cause = err
    except Exception as err:  # noqa: BLE001 - connection refused, DNS, TLS: azure-core raises several kinds
        why, hint = "the endpoint cannot be reached", "check the store's account (and endpoint) and the network"
        cause = err
    first = str(cause).strip().splitlines()[0][:200] if str(cause).strip() else type(cause).__name__
    raise DsflowError("DSF-E393", f"the adls store '{store}' cannot reach {where}: {why} ({first})",
                      hint=hint) from cause


def drop(location: str, settings: dict[str, str]) -> None:
    """Delete every blob of the table (its log and data)."""
    container, path = container_and_path(location)
    client = service(settings, account_of(location, settings)).get_container_client(container)
    names = [b.name for b in client.list_blobs(name_starts_with=path.rstrip("/") + "/")]
    for start in range(0, len(names), 250):
        client.delete_blobs(*names[start:start + 250])


def list_tables(root: str, settings: dict[str, str], under: str = "") -> list[str]:
    """Paths (relative to the store's root) of the Delta tables under `root`/`under`."""
    container, root_path = container_and_path(root)
    prefix = "/".join(p for p in (root_path.strip("/"), under.strip("/")) if p)
    client = service(settings, account_of(root, settings)).get_container_client(container)
    found = set()
    for blob in client.list_blobs(name_starts_with=prefix + "/" if prefix else None):
        head, sep, _ = blob.name.partition("/_delta_log/")
        if sep:
            found.add(head[len(root_path.strip("/")):].strip("/") if root_path.strip("/") else head)
    return sorted(found)
