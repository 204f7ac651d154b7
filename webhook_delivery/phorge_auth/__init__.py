"""Sign in with Phorge: Phorge's own OAuth 2 server signs in Phorge's administrators (docs/operate/sign-in.md)."""
