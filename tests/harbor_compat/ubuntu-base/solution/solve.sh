#!/bin/bash
wc -l < /etc/hostname > /app/count
