-- People (docs/operations.md#people): a device a person signed in with, or paired while signed in,
-- is theirs (`person`: who the OpenID provider said they are, as JSON); a sign-in ends at
-- `expires_at` unless its provider renews it. Both NULL for a device paired by the operator.
ALTER TABLE devices ADD COLUMN person TEXT;
ALTER TABLE devices ADD COLUMN expires_at INTEGER;
