"""Orders, and the receipts the jobs write for them."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    name = models.CharField(max_length=200, unique=True)
    chain_id = models.CharField(max_length=100, blank=True)

    class Meta:
        app_label = "djshop"


class Receipt(models.Model):
    order = models.ForeignKey(Order, on_delete=models.CASCADE)
    text = models.CharField(max_length=200)
    thread = models.CharField(max_length=100)

    class Meta:
        app_label = "djshop"
