"""Workspace webhooks: registration, the notifications events imply, signed delivery with retries."""
