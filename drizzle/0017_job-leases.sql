CREATE TABLE "job_leases" (
	"job_id" uuid PRIMARY KEY NOT NULL,
	"queue" text NOT NULL,
	"run" uuid NOT NULL,
	"holder" text NOT NULL,
	"expires_at" timestamp with time zone NOT NULL
);

--> statement-breakpoint
-- Hand-written below.
-- Installation-wide bookkeeping of the job workers: the owner role only.
REVOKE ALL ON job_leases FROM atrium_app;
