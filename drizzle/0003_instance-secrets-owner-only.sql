-- Installation keys are for the owner role only; the application role reads none of them.
REVOKE ALL ON instance_secrets FROM atrium_app;
