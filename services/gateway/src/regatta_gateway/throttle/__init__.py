"""Throttling of failed authentications (token guessing, sign-in brute force)."""
